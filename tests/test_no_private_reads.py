"""No test or benchmark reads numatopo's private state: what a test checks goes through a
public, documented name, so a refactor that keeps behaviour keeps its tests.

A private read is `thing._name` on anything but the code's own `self`/`cls`/`super()`,
`from ... import _name`, or a private name handed to `monkeypatch.setattr`. Other
projects' internals that have no public way are listed below, each with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# kopf and kmock have no public way to these; numatopo's code is not among them.
THIRD_PARTY = {
    # kopf's registry lists its change-detecting handlers nowhere public.
    ("tests/operator/test_no_diffbase.py", "registry._changing"),
    ("tests/operator/test_no_diffbase.py", "registry._watching"),
    # kopf's per-object memo copies are made by its inventory only.
    ("tests/operator/test_memo_copies.py", "kopf._core.reactor.inventory"),
    # The benchmark speeds up kmock's emulator for 1,000-node runs (its docstring says how).
    ("benchmarks/bench_operator_scale.py", "kmock._internal"),
    ("benchmarks/bench_operator_scale.py", "emulator._KubernetesEmulator__get_objs"),
    # ...and makes its watch join the event bus before the replay (`watch_from_the_replay`).
    ("benchmarks/bench_operator_scale.py", "emulator._KubernetesEmulator__check"),
    # ...and its list says the version it was taken at (`version_every_write`).
    ("benchmarks/bench_operator_scale.py", "kmock.KubernetesEmulator._serve_list"),
    ("benchmarks/bench_operator_scale.py", "self.api._requests"),
    ("benchmarks/bench_operator_scale.py", "self.api._payloads"),
    ("benchmarks/bench_operator_scale.py", "view._source"),
    ("benchmarks/bench_operator_scale.py", "p._requests"),
    # ...and answers a LIST page by page, as asked (`pages_as_asked`), else as kmock does.
    ("benchmarks/bench_operator_scale.py", "emulator._serve_list"),
    # tracemalloc's raw traces: a Trace object per allocation took minutes to group.
    ("benchmarks/bench_operator_scale.py", "snapshot.traces._traces"),
}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def own(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in {"self", "cls"}
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if any(private(part) for part in module.split(".")):
                found.append(module)
            found += [f"{module}.{a.name}" for a in node.names if private(a.name)]
        elif isinstance(node, ast.Attribute) and private(node.attr) and not own(node.value):
            found.append(ast.unparse(node))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"setattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
        ):
            found.append(ast.unparse(node.func) + f"(..., {node.args[1].value!r})")
    return found


def test_no_test_or_benchmark_reads_private_state() -> None:
    found = []
    for folder in ("tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            where = str(path.relative_to(REPO))
            for read in reads(ast.parse(path.read_text(encoding="utf-8"))):
                if (where, read) not in THIRD_PARTY:
                    found.append(f"{where}: {read}")

    assert [] == found
