"""`numatopo inspect --svg`: a valid, self-contained diagram with every device drawn."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from numatopo_cli.render import svg
from numatopo_engine.model import Numatopology, ObjectMeta
from numatopo_exporter.discovery import hwloc_xml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SVG = "{http://www.w3.org/2000/svg}"
Run = Callable[[list[str]], Any]


def drawn(document: str) -> dict[str, int]:
    """How many GPU and NIC groups, NVLink strokes and NVSwitch bars the SVG holds."""
    root = ET.fromstring(document)
    classes = [element.get("class", "") for element in root.iter()]
    return {
        "gpu": classes.count("gpu"),
        "nic": classes.count("nic"),
        "nvlink": classes.count("nvlink") - 1,  # one is the legend's swatch
        "switch": classes.count("switch") - 1,
    }


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        pytest.param(
            "h100-sxm-8gpu-nvswitch",
            {"gpu": 8, "nic": 0, "nvlink": 8, "switch": 1},
            id="nvswitch-is-one-bar-and-a-stub-per-gpu",
        ),
        pytest.param(
            "v100-dgx1-hybrid-cube-mesh",
            {"gpu": 8, "nic": 1, "nvlink": 16, "switch": 0},
            id="cube-mesh-is-one-arc-per-linked-pair",
        ),
    ],
)
def test_cli_writes_the_diagram(
    run: Run, tmp_path: Path, sample: str, expected: dict[str, int]
) -> None:
    target = tmp_path / "node.svg"

    result = run(["inspect", "--sample", sample, "--svg", str(target), "-o", "json"])

    assert 0 == result.code
    assert sample == json.loads(result.out)["metadata"]["name"]
    assert f"numatopo inspect: wrote the diagram to {target}\n" == result.err
    assert expected == drawn(target.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        pytest.param(
            "nvidiaDGX2.xml", {"gpu": 16, "nic": 0, "nvlink": 16, "switch": 1}, id="dgx2-16-gpus"
        ),
        pytest.param(
            "24em64t-2n6c2t-pci.xml",
            {"gpu": 3, "nic": 1, "nvlink": 0, "switch": 0},
            id="pcie-only-gpus-and-a-nic",
        ),
        pytest.param(
            "192em64t-24n8c2t.xml.gz",
            {"gpu": 0, "nic": 1, "nvlink": 0, "switch": 0},
            id="24-numa-nodes-no-gpu",
        ),
    ],
)
def test_diagram_of_hwloc_machines(fixture: str, expected: dict[str, int]) -> None:
    spec = hwloc_xml.read_hwloc_xml(FIXTURES / "hwloc-xml" / fixture)
    document = svg.render_svg(Numatopology(metadata=ObjectMeta(name="<node & co>"), spec=spec))

    actual = drawn(document)

    assert expected == actual
    assert "&lt;node &amp; co&gt;" in document


def test_sockets_hold_their_numa_nodes() -> None:
    """Each socket box spans the NUMA boxes whose CPUs it holds (DGX-2: two sockets)."""
    spec = hwloc_xml.read_hwloc_xml(FIXTURES / "hwloc-xml" / "nvidiaDGX2.xml")
    root = ET.fromstring(svg.render_svg(Numatopology(metadata=ObjectMeta(name="n"), spec=spec)))
    boxes = {
        kind: [
            (float(r.get("x", 0)), float(r.get("x", 0)) + float(r.get("width", 0)))
            for r in root.iter(f"{SVG}rect")
            if r.get("class") == kind
        ]
        for kind in ("socket", "numa")
    }

    actual = [
        socket_left < numa_left < numa_right < socket_right
        for (socket_left, socket_right), (numa_left, numa_right) in zip(
            boxes["socket"], boxes["numa"], strict=True
        )
    ]

    assert [True, True] == actual
