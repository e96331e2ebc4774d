"""Progress of long commands: on a terminal a bar on stderr; piped, nothing at all."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from numatopo_cli.main import main
from numatopo_cli.progress import ProgressBar, progress_bar

REPO = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_only_on_a_terminal_or_when_forced() -> None:
    assert progress_bar(stream=io.StringIO()) is None
    assert isinstance(progress_bar(stream=io.StringIO(), force=True), ProgressBar)
    terminal = Terminal()
    bar = progress_bar("pods", stream=terminal)
    assert bar is not None
    bar(0, 10)
    bar(10, 10)
    shown = terminal.getvalue()
    assert shown.startswith("\r[")
    assert "10/10 pods" in shown
    assert shown.endswith("\n")


def test_redraws_are_throttled_but_the_last_is_always_drawn() -> None:
    terminal = Terminal()
    bar = ProgressBar(terminal, "pods")
    for done in range(1000):
        bar(done, 1000)
    bar(1000, 1000)
    assert terminal.getvalue().count("\r") < 20
    assert "1000/1000 pods" in terminal.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["domains", "--generate", "1x2x4x4", "-o", "json"],
        ["simulate", "--multi-node", "--layout", "1x2x2x4", "--jobs", "20", "-o", "json"],
    ],
)
def test_piped_commands_write_the_answer_alone(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert err == ""


def test_on_a_terminal_the_bar_goes_to_stderr_and_stdout_is_unchanged(tmp_path: Path) -> None:
    """The real command with its stderr on a pseudo-terminal: stdout (a file) is the same
    answer as when piped, the terminal shows the bar."""
    argv = [sys.executable, "-m", "numatopo_cli", "domains", "--generate", "1x2x4x4", "-o", "json"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            str(REPO / r) for r in ("engine", "kube", "operator", "exporter", "cli")
        ),
    }
    piped = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    leader, follower = pty.openpty()
    with (tmp_path / "out.json").open("w") as out:
        code = subprocess.run(argv, stdout=out, stderr=follower, env=env, check=False).returncode
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert code == 0
    assert (tmp_path / "out.json").read_text() == piped.stdout
    assert piped.stderr == ""
    assert b"nodes read" in shown
