"""The `run` fixture: `numatopo ...` in-process, returning exit code, stdout and stderr."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from numatopo_cli import main as cli


class Result(NamedTuple):
    code: int
    out: str
    err: str


Run = Callable[[Sequence[str | Path]], Result]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run `numatopo ARGS...` in-process; the exit code and what it printed."""

    def invoke(args: Sequence[str | Path]) -> Result:
        try:
            code = cli.main([str(arg) for arg in args])
        except SystemExit as exit_:  # argparse usage errors
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return Result(code=code, out=captured.out, err=captured.err)

    return invoke
