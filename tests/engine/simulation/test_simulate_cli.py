"""`numatopo simulate` on the command line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from numatopo_cli.main import main

SMALL = ["--sample-nodes", "20", "--limit", "150", "--scorer", "numatopo,best-fit"]


def run(argv: list[str]) -> int:
    return main(["simulate", *argv])


def test_json_output_has_one_entry_per_strategy(capsys):
    code = run([*SMALL, "-o", "json"])
    out = json.loads(capsys.readouterr().out)

    assert (0, ["numatopo", "best-fit"]) == (code, [s["strategy"] for s in out["strategies"]])


def test_table_output_names_the_strategies(capsys):
    run(SMALL)
    lines = capsys.readouterr().out.splitlines()

    assert ["STRATEGY", "numatopo", "best-fit"] == [line.split()[0] for line in lines[1:]]


def test_plot_is_written(tmp_path: Path, capsys):
    target = tmp_path / "sim.png"
    run([*SMALL, "--plot", str(target)])

    assert b"\x89PNG" == target.read_bytes()[:4]


def test_progress_bar_goes_to_stderr(capsys):
    run([*SMALL, "--progress"])

    assert "100.0%" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--scorer", "magic"], "--scorer 'magic': choose from numatopo", id="unknown-strategy"
        ),
        pytest.param(
            ["--trace", "/nonexistent.csv"], "cannot read /nonexistent.csv", id="missing-trace"
        ),
        pytest.param(
            ["--topology-dir", "/nonexistent"], "no *.json files there", id="empty-topology-dir"
        ),
    ],
)
def test_bad_input_exits_2_with_a_message(capsys, argv, message):
    code = run(argv)

    assert (2, True) == (code, message in capsys.readouterr().err)


def test_a_malformed_topology_map_is_explained(tmp_path: Path, capsys):
    bad = tmp_path / "map.json"
    bad.write_text('{"layouts": {}}')
    code = run([*SMALL, "--topology-map", str(bad)])

    expected = "numatopo simulate: topology map: 'layouts' must be a non-empty object\n"
    assert (2, expected) == (code, capsys.readouterr().err)


def test_topology_dir_nodes_replace_the_node_list(tmp_path: Path, capsys, topology_map):
    """Numatopology JSON files (as `inspect -o json` prints) are the cluster."""
    from numatopo_engine.model import Numatopology, ObjectMeta
    from numatopo_engine.simulation.layouts import build_node_spec
    from numatopo_engine.simulation.trace import NodeRow

    row = NodeRow("dgx", 96000, 786432, 8, "V100M32")
    spec = build_node_spec(row, topology_map.layout_for("V100M32", 8))
    obj = Numatopology(metadata=ObjectMeta(name="dgx"), spec=spec)
    (tmp_path / "dgx.json").write_text(json.dumps(obj.to_wire()))
    code = run(
        ["--topology-dir", str(tmp_path), "--limit", "50", "--scorer", "numatopo", "-o", "json"]
    )
    out = json.loads(capsys.readouterr().out)

    assert (0, 1, 8) == (code, out["nodes"], out["gpus"])


def test_plot_into_a_missing_directory_fails_before_the_replay(tmp_path: Path, capsys):
    code = run([*SMALL, "--plot", str(tmp_path / "no" / "sim.png")])

    assert (2, "") == (code, capsys.readouterr().out)


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch, capsys):
    """Without the `plot` extra the error comes at once, with the install command."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    code = run([*SMALL, "--plot", "sim.png"])

    assert (2, True) == (code, "pip install 'numatopo[plot]'" in capsys.readouterr().err)
