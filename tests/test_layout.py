"""Source roots are folders, never packages: nothing may shadow the stdlib `operator`."""

from __future__ import annotations

import operator
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_no_package_named_operator() -> None:
    for root in ("engine", "operator", "exporter", "cli"):
        assert not (REPO / root / "__init__.py").exists()

    assert hasattr(operator, "itemgetter")


def test_operator_not_shadowed_without_site() -> None:
    """`python -S` with the repo on sys.path is where a stray package would win; `tests/`
    is on pytest's path too, and its `tests/operator` folder (the operator's tests) must
    stay a plain folder that the stdlib module outranks."""
    assert not (REPO / "tests" / "operator" / "__init__.py").exists()
    out = subprocess.run(
        [sys.executable, "-S", "-c", "import operator; print(operator.__file__)"],
        cwd=REPO,
        env={"PYTHONPATH": f"{REPO / 'tests'}:{REPO}:{REPO / 'operator'}"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert str(REPO) not in out


def test_engine_is_pure() -> None:
    """The engine imports no I/O framework (kopf, kubernetes, pynvml, pyudev, psutil)."""
    banned = (
        "kopf",
        "kubernetes",
        "pynvml",
        "pyudev",
        "psutil",
        "numatopo_exporter",
        "numatopo_operator",
        "subprocess",
        "socket",
        "requests",
    )
    offenders = []
    for path in (REPO / "engine").rglob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            is_import = len(words) >= 2 and words[0] in ("import", "from")
            if is_import and words[1].split(".")[0] in banned:
                offenders.append(f"{path.name}: {line.strip()}")

    assert [] == offenders
