"""The `run` fixture: `numatopo ...` in-process, returning exit code, stdout and stderr."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from numatopo_cli import main as cli


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


Run = Callable[[Sequence[str]], Result]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run `numatopo ARGS...` in-process; the exit code and what it printed."""

    def invoke(args: Sequence[str]) -> Result:
        try:
            code = cli.main(list(args))
        except SystemExit as exit_:  # argparse usage errors
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return Result(code=code, out=captured.out, err=captured.err)

    return invoke
