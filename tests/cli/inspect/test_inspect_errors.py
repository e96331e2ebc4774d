"""Bad input to `numatopo inspect`: exit 2 and one line on stderr, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Run = Callable[[list[str]], Any]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["--nvidia-smi-topo", "{tmp}/missing.txt"],
            "{tmp}/missing.txt: no such nvidia-smi topo file",
            id="missing-topo-file",
        ),
        pytest.param(
            ["--hwloc-xml", "{tmp}"],
            "{tmp}: not a file (expected a hwloc XML file)",
            id="hwloc-xml-is-a-directory",
        ),
        pytest.param(
            ["--nvidia-smi-topo", "{tmp}/garbage.txt"],
            "{tmp}/garbage.txt: not nvidia-smi topo -m output",
            id="garbage-topo-file",
        ),
        pytest.param(
            ["--hwloc-xml", "{tmp}/garbage.txt"], "{tmp}/garbage.txt: ", id="garbage-hwloc-xml"
        ),
        pytest.param(
            ["--sysfs-root", "{tmp}/nowhere"],
            "{tmp}/nowhere: no such directory",
            id="missing-sysfs-root",
        ),
        pytest.param(
            ["--sample", "dgx-9000"],
            "unknown sample 'dgx-9000'; available: a100-sxm-8gpu-nvswitch, "
            "h100-sxm-8gpu-nvswitch, v100-dgx1-hybrid-cube-mesh",
            id="unknown-sample-lists-the-known",
        ),
        pytest.param(
            ["--sample", "a100-sxm-8gpu-nvswitch", "--svg", "{tmp}/no/such/dir/x.svg"],
            "{tmp}/no/such/dir/x.svg: cannot write the diagram: No such file or directory",
            id="svg-target-not-writable",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    run: Run, tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "garbage.txt").write_bytes(b"\x00\xffGPU0 is not here <xml>\n" * 20)
    expected_start = "numatopo inspect: error: " + says.format(tmp=tmp_path)

    result = run(["inspect", "--no-nvml", *(a.format(tmp=tmp_path) for a in args)])

    assert 2 == result.code
    assert "" == result.out
    assert 1 == len(result.err.splitlines())
    assert result.err.startswith(expected_start), result.err
    assert "Traceback" not in result.err
