"""`numatopo inspect` shows GPUs in MIG mode and their MIG devices (the DGX A100 MIG node)."""

from __future__ import annotations

import json
from pathlib import Path

from numatopo_cli.render.table import render_table
from numatopo_engine.model import Numatopology

NODE = Path(__file__).resolve().parents[2] / "fixtures" / "pods" / "nodes" / "dgx-a100-mig.json"


def test_accelerator_rows_show_mig_layouts() -> None:
    topology = Numatopology.model_validate(json.loads(NODE.read_text()))
    out = render_table(topology)
    section = out.split("Accelerators\n", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(None, 6) for line in section.splitlines()]
    assert ["ID", "RESOURCE", "VENDOR", "MODEL", "PCI", "NUMA", "MIG"] == rows[0]
    by_id = {row[0]: row for row in rows[1:]}
    assert "2x 3g.40gb (8,9)" == by_id["0"][6]
    assert "7x 1g.10gb (10,11,12,13,14,15,16)" == by_id["1"][6]
    assert "(MIG)" == by_id["4"][1]
    assert "-" == by_id["2"][-1]
    assert by_id["2"][1] == "nvidia.com/gpu"
