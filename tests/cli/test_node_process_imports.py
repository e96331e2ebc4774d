"""What a node process loads: `numatopo agent` and `numatopo exporter` run in an 80 MiB
budget (benchmarks/bench_agent_memory.py), so neither imports the operator, kopf,
numpy (the engine's allocation) or an HTTP framework. Checked in a fresh interpreter
as the console script starts it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("kopf", "numatopo_operator", "numpy", "aiohttp", "celpy", "kubernetes_asyncio")

PROBE = """
import json, sys
from numatopo_cli.main import main
try:
    main([sys.argv[1], "--help"])
except SystemExit:
    pass
print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))
"""


@pytest.mark.parametrize("command", ["agent", "exporter"])
def test_a_node_process_loads_nothing_it_does_not_use(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, command], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert loaded.isdisjoint(HEAVY), sorted(loaded.intersection(HEAVY))


def test_the_engine_facade_still_offers_allocation() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, numatopo_engine as e; "
         "print('numpy' in sys.modules, callable(e.allocate), 'numpy' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["False", "True", "True"]
