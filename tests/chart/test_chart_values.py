"""values.yaml is documented key by key and values.schema.json describes all of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

jsonschema = pytest.importorskip("jsonschema")

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "numatopo"
VALUES_TEXT = (CHART_DIR / "values.yaml").read_text()
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
VALUES_DIR = Path(__file__).resolve().parent / "values"

Path_ = tuple[str, ...]


def documented_paths(text: str) -> Iterator[tuple[Path_, bool]]:
    """(path of every key, whether a `# --` comment sits right above it)."""
    lines = text.splitlines()

    def has_doc(line_number: int) -> bool:
        above = line_number - 1
        while above >= 0 and lines[above].lstrip().startswith("#"):
            if lines[above].lstrip().startswith("# --"):
                return True
            above -= 1
        return False

    def walk(node: yaml.Node, prefix: Path_) -> Iterator[tuple[Path_, bool]]:
        if not isinstance(node, yaml.MappingNode):
            return
        for key, value in node.value:
            path = (*prefix, key.value)
            yield path, has_doc(key.start_mark.line)
            walk_value = value if isinstance(value, yaml.MappingNode) else None
            if walk_value is not None:
                yield from walk(walk_value, path)

    yield from walk(yaml.compose(text), ())


def test_every_value_is_documented() -> None:
    """Each key has a `# --` comment, or sits inside a documented one (a Kubernetes
    object passed through as is, such as `resources`)."""
    paths = dict(documented_paths(VALUES_TEXT))
    undocumented = [
        ".".join(path)
        for path in paths
        if not any(paths.get(path[:n]) for n in range(1, len(path) + 1))
        and not any(other[: len(path)] == path and len(other) > len(path) for other in paths)
    ]

    assert [] == undocumented


def _schema_at(schema: dict[str, Any], path: Path_) -> dict[str, Any] | None:
    """The subschema describing `path`, following `$ref`s; None where none is declared."""
    for key in path:
        while "$ref" in schema:
            schema = SCHEMA["definitions"][schema["$ref"].rsplit("/", 1)[1]]
        properties = schema.get("properties")
        if properties is None:
            return schema if schema.get("additionalProperties") not in (False, None) else None
        if key not in properties:
            return None
        schema = properties[key]
    return schema


def test_schema_declares_every_documented_value() -> None:
    """A value the schema does not know would be refused (`additionalProperties: false`)."""
    missing = [
        ".".join(path)
        for path, documented in documented_paths(VALUES_TEXT)
        if documented and _schema_at(SCHEMA, path) is None
    ]

    assert [] == missing


def test_objects_are_closed_in_the_schema() -> None:
    """Every object the schema spells out refuses unknown keys, so typos fail the install."""

    def open_objects(node: Any, where: str) -> Iterator[str]:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                yield where
            for key, value in node.items():
                yield from open_objects(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from open_objects(value, f"{where}/{index}")

    assert [] == list(open_objects(SCHEMA, "#"))


@pytest.mark.parametrize(
    "values_file",
    [pytest.param(None, id="defaults")]
    + [pytest.param(p.name, id=p.stem) for p in sorted(VALUES_DIR.glob("*.yaml"))],
)
def test_value_sets_satisfy_the_schema(values_file: str | None) -> None:
    """The defaults and the test value sets pass a second, independent validator."""
    defaults = yaml.safe_load(VALUES_TEXT)
    values = defaults if values_file is None else _merged(defaults, values_file)
    errors = [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(values)]

    assert [] == errors


def _merged(defaults: dict[str, Any], values_file: str) -> dict[str, Any]:
    def merge(base: Any, override: Any) -> Any:
        if isinstance(base, dict) and isinstance(override, dict):
            return {
                k: merge(base.get(k), override.get(k)) if k in override else base[k]
                for k in base.keys() | override.keys()
            }
        return override

    return dict(merge(defaults, yaml.safe_load((VALUES_DIR / values_file).read_text())))
