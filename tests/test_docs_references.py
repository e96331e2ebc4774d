"""The docs name files, modules and functions that exist: a `name.py`, `path/to/file` or
`module.function` in backticks in README.md, docs/*.md or the chart's README resolves in
the tree as it is, so a move or a rename that forgets the docs fails here.

What counts as a reference (anything else in backticks is left alone: wire fields,
commands, annotations, other projects' names):
- a file: a name ending in `.py`, `.md`, `.toml`, `.yaml` or `.json`, or a path under a
  top-level folder of the repository; `a/b.py` must exist from the repository root, a
  source root, or as the end of a tracked path; a bare `b.py` must be a tracked file's
  name;
- a dotted name whose first part is one of numatopo's packages, modules (`allocation`,
  `groups.release`), top-level classes (`Runtime.in_engine_thread`) or benchmarks
  (`bench_engine.count_only_pass`): each further part must be an attribute (a
  function, class, constant, field or `self.` attribute);
- a dotted name whose first part is a top-level key of the chart's values
  (`operator.groups.enabled`): the path must be in values.yaml;
- any other dotted name whose second part is one of numatopo's functions or classes
  names a module that is no more (`grouping.next_step` once groups became a package).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = ("engine", "kube", "operator", "exporter", "cli")
CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# Backticked words that look like module.attribute or a file but are something else: wire
# fields named like one of our modules, a cgroup file, a Secret's keys, files of other
# projects or of the reader's.
NOT_CODE = re.compile(r"^(status|spec|metadata|settings|devices|dra|cpuset)\.")
ELSEWHERE = {"tls.crt", "tls.key", "ca.crt", "NODE.json"}
VALUES = REPO / "helm" / "numatopo" / "values.yaml"


def doc_paths() -> list[Path]:
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [*found, REPO / "helm" / "numatopo" / "README.md"]


@functools.cache
def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if (REPO / line).exists()]


@functools.cache
def modules() -> dict[str, list[str]]:
    """Every dotted tail of every source module -> the modules it names:
    `release` and `groups.release` -> `numatopo_operator.groups.release`."""
    names: dict[str, list[str]] = defaultdict(list)
    for root in SOURCE_ROOTS:
        for path in sorted((REPO / root).glob("numatopo_*/**/*.py")):
            parts = list(path.relative_to(REPO / root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            full = ".".join(parts)
            for start in range(len(parts)):
                names[".".join(parts[start:])].append(full)
    return names


@functools.cache
def classes() -> dict[str, list[tuple[str, str]]]:
    """Top-level class name -> (module, name) of every source module that defines it."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for full in {m for ms in modules().values() for m in ms}:
        for root in SOURCE_ROOTS:
            base = REPO / root / full.replace(".", "/")
            path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            if path.exists():
                tree = ast.parse(path.read_text(encoding="utf-8"))
                for node in tree.body:
                    if isinstance(node, ast.ClassDef):
                        found[node.name].append((full, node.name))
    return found


@functools.cache
def benchmarks() -> dict[str, set[str]]:
    """Each benchmark script -> its top-level names (read, not imported: they set up
    `sys.path` and arguments when run)."""
    found = {}
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        found[path.stem] = names
    return found


@functools.cache
def values() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(VALUES.read_text(encoding="utf-8"))
    return loaded


def values_ok(text: str) -> bool | None:
    """True or False for a path into the chart's values; None for anything else."""
    parts = text.split(".")
    if parts[0] not in values():
        return None
    node: object = values()
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@functools.cache
def top_level_names() -> set[str]:
    """Every function and class defined at the top of a source module."""
    names = set()
    for root in SOURCE_ROOTS:
        for path in (REPO / root).glob("numatopo_*/**/*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
    return names


def has(obj: object, name: str) -> object | None:
    """`obj.name`, counting what a class's instances carry (fields, `self.name = ...`)."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if inspect.isclass(obj):
        for cls in obj.__mro__:
            if name in getattr(cls, "__annotations__", {}) or name in getattr(
                cls, "model_fields", {}
            ):
                return object()
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                continue
            if re.search(rf"\bself\.{name}\b\s*(?::[^=\n]+)?=", source):
                return object()
    return None


def resolves(start: object, rest: list[str]) -> bool:
    obj = start
    for part in rest:
        found = has(obj, part)
        if found is None:
            return False
        obj = found
    return True


def dotted_ok(text: str) -> bool | None:
    """True or False for a dotted reference to numatopo's code; None for anything else."""
    parts = text.split(".")
    if parts[0] in benchmarks():
        return len(parts) == 2 and parts[1] in benchmarks()[parts[0]]
    checked = False
    for cut in range(len(parts), 0, -1):
        head, rest = ".".join(parts[:cut]), parts[cut:]
        for full in modules().get(head, []):
            checked = True
            module: ModuleType = importlib.import_module(full)
            if resolves(module, rest):
                return True
        if cut == 1 and head in classes():
            checked = True
            for full, name in classes()[head]:
                if resolves(getattr(importlib.import_module(full), name), rest):
                    return True
    return False if checked else None


def file_ok(text: str) -> bool:
    if "/" not in text:
        return any(Path(path).name == text for path in tracked())
    text = text.rstrip("/")
    if (REPO / text).exists() or any((REPO / root / text).exists() for root in SOURCE_ROOTS):
        return True
    return any(path == text or path.endswith("/" + text) for path in tracked())


def references(path: Path) -> Iterator[tuple[int, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in CODE.finditer(line):
            yield number, match.group(1).strip()


def file_like(text: str) -> bool:
    if text.startswith(("/", "~")) or any(c in text for c in " *{<$"):
        return False
    if re.search(r"\.(py|md|toml|yaml|json)$", text):
        return True
    first = text.split("/", maxsplit=1)[0]
    return "/" in text and first in {p.name for p in REPO.iterdir() if p.is_dir()}


def broken(path: Path) -> list[str]:
    out = []
    for number, text in references(path):
        target = re.sub(r"\(.*$", "", text)  # `score_many(...).rank`: the call's name
        if target in ELSEWHERE:
            ok = None
        elif file_like(target):
            ok: bool | None = file_ok(target.split(":")[0])
        elif DOTTED.fullmatch(target) and not NOT_CODE.match(target):
            either = (dotted_ok(target), values_ok(target))
            ok = True if True in either else False if False in either else None
            if ok is None and target.split(".")[1] in top_level_names():
                ok = False  # one of our functions, under a module name that is no more
        else:
            ok = None
        if ok is False:
            out.append(f"{path.relative_to(REPO)}:{number}: `{text}`")
    return out


@pytest.mark.parametrize("doc", doc_paths(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_module_and_function_the_docs_name_exists(doc: Path) -> None:
    assert [] == broken(doc)
