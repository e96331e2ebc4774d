"""Every argument the chart passes to a numatopo container is one its command accepts.

`test_every_value_that_reaches_args_parses` goes through values.yaml itself: each
setting (booleans flipped, numbers and strings changed, lists shortened or grown, each
kept valid by values.schema.json) is rendered, and where it changes a numatopo
container's arguments they must parse with the `numatopo` CLI's own parser and parse to
something else than before. Which values reach arguments is found by rendering, not
listed, so a value added later is covered without editing this file.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from numatopo_cli.main import build_parser

jsonschema = pytest.importorskip("jsonschema")

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "numatopo"
# As in this folder's conftest.py (`render`: values -> parsed manifests).
Manifest = dict[str, Any]
Render = Callable[[dict[str, Any] | None], list[Manifest]]

CUSTOM_PATHS = {
    "node": {
        "hostPaths": {
            "kubeletDir": "/data/kubelet",
            "kubeletConfig": "/etc/kubernetes/kubelet/config.json",
        }
    }
}
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
SCHEMA: dict[str, Any] = json.loads((CHART_DIR / "values.schema.json").read_text())
VALUES_DIR = Path(__file__).resolve().parent / "values"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")

ValuePath = tuple[str, ...]


def numatopo_containers(
    manifests: list[Manifest], repository: str = DEFAULTS["image"]["repository"]
) -> list[tuple[str, list[str]]]:
    """(kind/workload/container, args) of every container that runs the `numatopo` CLI:
    the chart's image (from `repository`) with its own entrypoint (no `command`)."""
    found = []
    for manifest in manifests:
        if manifest["kind"] not in WORKLOADS:
            continue
        pod = manifest["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            image = str(container.get("image", ""))
            if "command" not in container and image.startswith(
                (f"{repository}:", f"{repository}@")
            ):
                name = f"{manifest['kind']}/{manifest['metadata']['name']}/{container['name']}"
                found.append((name, [str(a) for a in container.get("args") or []]))
    return found


def parse(args: list[str]) -> argparse.Namespace | str:
    """`numatopo`'s parse of `args`, or what it printed when it refused them."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return build_parser().parse_args(args)
    except SystemExit:
        return errors.getvalue().strip() or "refused"


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(None, id="defaults"),
        pytest.param(CUSTOM_PATHS, id="eks-style-kubelet-paths"),
    ],
)
def test_container_args_parse_with_the_real_cli(render: Render, values: Any) -> None:
    containers = numatopo_containers(render(values))

    assert {"operator", "exporter", "agent"} == {args[0] for _, args in containers}
    for name, args in containers:
        # $(NODE_NAME) is the kubelet's env expansion; argparse takes it as a string.
        parsed = parse(args)
        assert isinstance(parsed, argparse.Namespace), f"{name}: numatopo {args}: {parsed}"


def test_custom_kubelet_paths_reach_the_exporter_as_host_paths(render: Render) -> None:
    """The exporter reads host paths under --sysfs-root, so they carry no /host prefix."""
    [(_, exporter)] = [
        c for c in numatopo_containers(render(CUSTOM_PATHS)) if c[1][0] == "exporter"
    ]

    assert "--kubelet-config=/etc/kubernetes/kubelet/config.json" in exporter
    assert "--kubelet-state=/data/kubelet/cpu_manager_state" in exporter


# -- every value -------------------------------------------------------------------------


def leaves(values: Any, prefix: ValuePath = ()) -> Iterator[ValuePath]:
    """Paths of every scalar and every list of scalars in `values`, depth first; lists
    of objects (tolerations, env entries) configure pods, never flags."""
    if isinstance(values, dict):
        for key, value in values.items():
            yield from leaves(value, (*prefix, key))
    elif not isinstance(values, list) or _of_scalars(values, prefix):
        yield prefix


def _of_scalars(values: list[Any], path: ValuePath) -> bool:
    items = _resolve(schema_at(path).get("items", {})).get("type")
    return items not in ("object", "array") and not any(isinstance(v, dict | list) for v in values)


def schema_at(path: ValuePath) -> dict[str, Any]:
    """The schema of the value at `path`, `$ref`s followed ({} where it says nothing)."""
    node: dict[str, Any] = SCHEMA
    for key in path:
        node = _resolve(node).get("properties", {}).get(key, {})
    return _resolve(node)


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].removeprefix("#/definitions/")]
    return node


def is_extra_flags(path: ValuePath) -> bool:
    """`*.extraArgs`-style values: flags passed through verbatim, whatever whoever sets
    them writes; the schema marks them with the `argList` definition."""
    node: dict[str, Any] = SCHEMA
    for key in path:
        node = _resolve(node).get("properties", {}).get(key, {})
    return bool(node.get("$ref") == "#/definitions/argList")


def get(values: Any, path: ValuePath) -> Any:
    for key in path:
        values = values.get(key) if isinstance(values, dict) else None
    return values


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of value layers: maps merge key by key, anything else replaces."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def setting(path: ValuePath, value: Any) -> dict[str, Any]:
    out: Any = value
    for key in reversed(path):
        out = {key: out}
    return dict(out)


def candidates(current: Any, schema: dict[str, Any]) -> list[Any]:
    """Non-default settings to try, most plausible first; the schema then keeps the
    valid ones. Values that may take several types try each type's."""
    found: list[Any] = [e for e in schema.get("enum", []) if e != current]
    found += [e for e in schema.get("examples", []) if e != current]
    if isinstance(current, bool):
        found.append(not current)
    elif isinstance(current, int):
        found += [current + 1, current - 1, current * 2, schema.get("minimum")]
    elif isinstance(current, float):
        found += [current + 1.5, current / 2]
    elif isinstance(current, str):
        found += [f"{current}x", current * 2] if current else []
        found += ["custom", "example.com/custom", "5s", "/custom", "127.0.0.1", "::1"]
    elif isinstance(current, list):
        items = _resolve(schema.get("items", {}))
        empty = {"integer": 0, "boolean": False}.get(str(items.get("type")), "")
        seed = current[0] if current else empty
        grown = [[*current, c] for c in candidates(seed, items) if c not in current]
        found += [current[:-1], current[1:], *grown]
    for branch in schema.get("oneOf", []) + schema.get("anyOf", []):
        seed = {"integer": 1, "string": "", "boolean": False}.get(str(_resolve(branch).get("type")))
        if seed is not None and type(seed) is not type(current):
            found += candidates(seed, _resolve(branch))
    return found


def without_extra_flags(values: dict[str, Any], prefix: ValuePath = ()) -> dict[str, Any]:
    """`values` less its extra flags, which come last and would hide what a value sets."""
    return {
        key: without_extra_flags(value, (*prefix, key)) if isinstance(value, dict) else value
        for key, value in values.items()
        if not is_extra_flags((*prefix, key))
    }


VALIDATOR = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)
# The bases each setting is changed from: the defaults and the chart tests' value sets,
# which switch optional parts on, so values under those parts reach containers too.
BASES: dict[str, dict[str, Any]] = {"defaults": {}} | {
    path.stem: yaml.safe_load(path.read_text()) for path in sorted(VALUES_DIR.glob("*.yaml"))
}
CASES = [
    pytest.param(base, path, id=f"{base}:{'.'.join(path)}")
    for base in BASES
    for path in leaves(DEFAULTS)
    if path and not is_extra_flags(path)
]


def settings_of(layer: dict[str, Any], path: ValuePath) -> Iterator[tuple[Any, dict[str, Any]]]:
    """(value, values to render) for each valid non-default setting of `path` over `layer`."""
    current = get(merged(DEFAULTS, layer), path)
    for value in candidates(current, schema_at(path)):
        override = merged(layer, setting(path, value))
        valid = VALIDATOR.is_valid(merged(DEFAULTS, override))
        if valid and value is not None and value != current:
            yield value, override


@pytest.fixture(scope="session")
def workload_args(chart: Any) -> Callable[[dict[str, Any]], dict[str, list[str]]]:
    """`values` -> numatopo containers' args; parses only templates with containers
    (the CRD alone would take most of the time of thousands of renders)."""

    def render(values: dict[str, Any]) -> dict[str, list[str]]:
        rendered = chart.render(values or None, name="numatopo", namespace="ns", is_install=True)
        manifests = [
            document
            for name in sorted(rendered)
            if "containers:" in rendered[name]
            for document in yaml.load_all(rendered[name], Loader=_LOADER)
            if document
        ]
        repository = merged(DEFAULTS, values)["image"]["repository"]
        return dict(numatopo_containers(manifests, repository))

    return render


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BEFORE: dict[str, dict[str, list[str]]] = {}  # each base's render, shared by its cases


@pytest.mark.parametrize(("base", "path"), CASES)
def test_every_value_that_reaches_args_parses(
    workload_args: Callable[[dict[str, Any]], dict[str, list[str]]], base: str, path: ValuePath
) -> None:
    """A changed value either changes no numatopo container's arguments, or changes them
    into arguments the CLI accepts and reads differently; a chart that cannot honour a
    setting must refuse it by name at render time, not hand it to a crash-looping pod."""
    from helm_python.errors import HelmRenderError

    layer = without_extra_flags(BASES[base])
    before = _BEFORE.get(base) or _BEFORE.setdefault(base, workload_args(layer))
    refusals: list[str] = []
    tried = 0
    for value, override in settings_of(layer, path):
        tried += 1
        try:
            after = workload_args(override)
        except HelmRenderError as exc:
            refusals.append(str(exc))
            continue
        for name, args in after.items():
            if before.get(name) == args:
                continue
            parsed = parse(args)
            assert isinstance(parsed, argparse.Namespace), (
                f"{'.'.join(path)}={value!r}: {name}: numatopo {' '.join(args)}: {parsed}"
            )
            if name in before:
                assert vars(parse(before[name])) != vars(parsed), (
                    f"{'.'.join(path)}={value!r} changes {name}'s arguments "
                    f"({before[name]} -> {args}) but not what the CLI reads from them"
                )
        return
    dotted = ".".join(path)
    assert tried, f"{dotted}: no valid non-default setting to try"
    assert all(dotted in text for text in refusals), (
        f"{dotted}: the chart refuses every other setting without naming it: {refusals}"
    )


def test_the_sweep_reaches_every_numatopo_container_with_flags(
    workload_args: Callable[[dict[str, Any]], dict[str, list[str]]],
) -> None:
    """Every container whose default arguments carry flags has some value that changes
    them, so the sweep above is not vacuous there."""
    from helm_python.errors import HelmRenderError

    before = workload_args({})
    reached: set[str] = set()
    for path in leaves(DEFAULTS):
        if not path or is_extra_flags(path):
            continue
        for _, override in settings_of({}, path):
            with contextlib.suppress(HelmRenderError):
                after = workload_args(override)
                reached |= {n for n, a in after.items() if n in before and before[n] != a}
                break

    assert {n for n, args in before.items() if args[1:]} <= reached
