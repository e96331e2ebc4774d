"""The pod and node list CSVs `numatopo simulate` reads, as real exports write them: each is
read right, or refused in one line naming the file, the line and the column (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numatopo_cli.main import main

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time"
PODS = [
    "p0,8000,16384,1,1000,,LS,Running,10",
    "p1,4000,8192,1,500,,LS,Running,20",
    "p2,16000,65536,2,1000,,LS,Running,30",
    "p3,2000,4096,0,0,,BE,Running,40",
]
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\nn1,64000,262144,0,\n"


def simulate(tmp_path: Path, pods: str | bytes, *extra: str, nodes: str = NODES) -> int:
    trace, node_list = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    if isinstance(pods, bytes):
        trace.write_bytes(pods)
    else:
        trace.write_text(pods, newline="")
    node_list.write_text(nodes, newline="")
    argv = ["--trace", str(trace), "--nodes", str(node_list), "--tune", "0", "-o", "json"]
    return main(["simulate", *argv, "--scorer", "numatopo,best-fit", *extra])


def report(capsys) -> tuple[int, int, int, int]:
    """pods, fractional, CPU-only and multi-GPU pods of the report just printed."""
    out = json.loads(capsys.readouterr().out)
    return out["pods"], out["fractional_pods"], out["cpu_only_pods"], out["multi_gpu_pods"]


def lines(*rows: str, header: str = POD_HEADER, end: str = "\n") -> str:
    return end.join([header, *rows]) + end


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(lines(*PODS), id="plain"),
        pytest.param(lines(*PODS, end="\r\n"), id="crlf"),
        pytest.param(lines(*PODS) + "\n\n\n", id="empty-trailing-lines"),
        pytest.param(
            lines(*(f'"{r.split(",", 1)[0]}",{r.split(",", 1)[1]}' for r in PODS)),
            id="quoted-fields",
        ),
        pytest.param(
            lines(*(f"{r},x,y" for r in PODS), header=POD_HEADER + ",deletion_time,extra"),
            id="extra-columns",
        ),
        pytest.param(
            lines(
                *(",".join(reversed(r.split(","))) for r in PODS),
                header=",".join(reversed(POD_HEADER.split(","))),
            ),
            id="columns-reversed",
        ),
        pytest.param(
            lines(
                *(",".join(r.split(",")[:5]) for r in PODS),
                header="name,cpu_milli,memory_mib,num_gpu,gpu_milli",
            ),
            id="optional-columns-missing",
        ),
        pytest.param(
            lines(*PODS, header=" , ".join(POD_HEADER.split(","))), id="blanks-around-names"
        ),
        pytest.param(
            lines(*(r.replace(",0,0,", ",0,,").replace("000,", "000.0,") for r in PODS)),
            id="pandas-floats-and-blank-cpu-pod-share",
        ),
    ],
)
def test_exports_are_read_alike(tmp_path: Path, capsys, text: str):
    code = simulate(tmp_path, text)

    assert (0, (4, 1, 1, 1)) == (code, report(capsys))


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path, capsys):
    code = simulate(tmp_path, b"\xef\xbb\xbf" + lines(*PODS).encode())

    assert (0, (4, 1, 1, 1)) == (code, report(capsys))


def test_a_quoted_line_break_does_not_shift_the_line_numbers(tmp_path: Path, capsys):
    text = lines('"p\n0",8000,16384,1,1000,,LS,Running,10', "", "p1,4000,oops,1,500,,LS,Running,20")
    code = simulate(tmp_path, text)

    expected = f"numatopo simulate: {tmp_path}/pods.csv line 5: column 'memory_mib' is 'oops', "
    assert (2, True) == (code, capsys.readouterr().err.startswith(expected))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param("p,,16384,1,1000,,LS,Running,1", "column 'cpu_milli' is empty", id="blank"),
        pytest.param(
            "p,8000,inf,1,1000,,LS,Running,1", "'memory_mib' is 'inf', not a finite", id="inf"
        ),
        pytest.param(
            "p,8000,1e400,1,1000,,LS,Running,1", "is '1e400', not a finite", id="overflow"
        ),
        pytest.param("p,8000,nan,1,1000,,LS,Running,1", "is 'nan', not a finite", id="nan"),
        pytest.param(
            "p,-1,16384,1,1000,,LS,Running,1", "'cpu_milli' is negative (-1)", id="negative"
        ),
        pytest.param(
            "p,8000,16384,1,1500,,LS,Running,1", "more than one GPU", id="milli-over-1000"
        ),
        pytest.param("p,8000,16384,2,500,,LS,Running,1", "is 500 with num_gpu 2", id="shared-pair"),
        pytest.param("p,8000,16384,1,0,,LS,Running,1", "is 0 with num_gpu 1", id="gpu-no-share"),
        pytest.param("p,8000,16384,1,,,LS,Running,1", "'gpu_milli' is empty", id="gpu-blank-share"),
        pytest.param("p,8000", "column 'num_gpu' is empty", id="short-row"),
        pytest.param("p,8000,16384,0,x,,BE,Running,1", "'gpu_milli' is 'x'", id="cpu-pod-share"),
    ],
)
def test_bad_cells_are_refused_with_file_line_and_column(tmp_path: Path, capsys, row, message):
    code = simulate(tmp_path, lines(PODS[0], row))
    err = capsys.readouterr().err

    prefix = f"numatopo simulate: {tmp_path}/pods.csv line 3: "
    assert (2, True, True, 1) == (code, err.startswith(prefix), message in err, err.count("\n"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(POD_HEADER + "\n", "pods.csv: no rows", id="header-only"),
        pytest.param("", "pods.csv: no rows", id="empty-file"),
        pytest.param(
            lines("p,1", header="name,cpu"), "missing column(s) cpu_milli, memory_mib", id="wrong"
        ),
        pytest.param(
            lines("p,1,2,3", header="name,cpu"),
            "missing column(s) cpu_milli, memory_mib, num_gpu, gpu_milli; found ['cpu', 'name']",
            id="wrong-and-cells-past-the-header",
        ),
        pytest.param(b"name,cpu_milli\n\xff\xfe\n", "pods.csv: not UTF-8 text", id="not-utf8"),
    ],
)
def test_files_without_pods_are_refused(tmp_path: Path, capsys, text, message):
    code = simulate(tmp_path, text)
    err = capsys.readouterr().err

    assert (2, True, 1) == (code, message in err, err.count("\n"))


def test_creation_arrival_needs_creation_times(tmp_path: Path, capsys):
    """The multigpu* pod lists have no creation_time: file order is no creation order."""
    text = lines("p0,8000,16384,1,1000,,LS,Running,10", "p1,8000,16384,1,1000,,LS,Running,")
    code = simulate(tmp_path, text, "--arrival", "creation")

    message = f"{tmp_path}/pods.csv line 3: column 'creation_time' is empty"
    assert (2, True) == (code, message in capsys.readouterr().err)


def test_creation_arrival_refuses_a_list_without_the_column(tmp_path: Path, capsys):
    text = lines("p0,8000,16384,1,1000", header="name,cpu_milli,memory_mib,num_gpu,gpu_milli")
    code = simulate(tmp_path, text, "--arrival", "creation")

    assert (2, True) == (code, "missing column(s) creation_time" in capsys.readouterr().err)


def test_blank_creation_times_are_fine_for_shuffled_arrival(tmp_path: Path, capsys):
    code = simulate(tmp_path, lines(*(r.rsplit(",", 1)[0] + "," for r in PODS)))

    assert (0, (4, 1, 1, 1)) == (code, report(capsys))


def test_gpu_spec_lists_with_blanks_match_their_models(tmp_path: Path, capsys):
    """`gpu_spec` "T4 | G2" allows G2 nodes; a model no node has fails the pod, counted."""
    text = lines("p0,8000,16384,1,1000,T4 | G2,LS,Running,1", "p1,8000,16384,1,1000,A100,LS,R,2")
    simulate(tmp_path, text)
    out = json.loads(capsys.readouterr().out)

    assert [(1, 1)] * 2 == [(s["placed"], s["failed"]) for s in out["strategies"]]


def test_node_list_errors_name_the_node_file(tmp_path: Path, capsys):
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,eight,G2\n"
    code = simulate(tmp_path, lines(*PODS), nodes=nodes)

    expected = f"numatopo simulate: {tmp_path}/nodes.csv line 2: column 'gpu' is 'eight', "
    assert (2, True) == (code, capsys.readouterr().err.startswith(expected))


def test_duplicate_pod_names_are_separate_pods(tmp_path: Path, capsys):
    """Pod names repeat across namespaces; each row holds its own GPUs to the end."""
    rows = [f"p,8000,16384,{gpus},1000,,LS,Running,{t}" for t, gpus in enumerate((4, 2, 2, 2))]
    code = simulate(tmp_path, lines(*rows), "--arrival", "creation")
    out = json.loads(capsys.readouterr().out)

    placed = [(s["placed"], s["failed"], s["alloc_pct_final"]) for s in out["strategies"]]
    assert (0, [(3, 1, 100.0)] * 2) == (code, placed)


def test_a_pod_wider_than_every_node_fails_counted(tmp_path: Path, capsys):
    text = lines(PODS[0], "wide,8000,16384,12,1000,,LS,Running,2")
    code = simulate(tmp_path, text)
    out = json.loads(capsys.readouterr().out)

    assert (0, [(1, 1)] * 2) == (code, [(s["placed"], s["failed"]) for s in out["strategies"]])


def test_a_model_the_topology_map_does_not_name_gets_its_default_layout(tmp_path: Path, capsys):
    nodes = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,4,H100X\n"
    code = simulate(tmp_path, lines(PODS[0], PODS[2]), nodes=nodes)
    out = json.loads(capsys.readouterr().out)

    assert (0, [2, 2]) == (code, [s["placed"] for s in out["strategies"]])


@pytest.mark.parametrize(
    ("nodes", "extra", "message"),
    [
        pytest.param("n1,64000,262144,0,\n", [], "no GPUs on the nodes:", id="cpu-nodes"),
        pytest.param(
            "n1,64000,262144,0,\nn2,64000,262144,0,\nn0,96000,393216,8,G2\n",
            ["--sample-nodes", "1", "--seed", "1"],
            "no GPUs on the nodes (the 1 drawn by --sample-nodes)",
            id="a-sample-of-cpu-nodes",
        ),
    ],
)
def test_a_cluster_without_gpus_is_refused(tmp_path: Path, capsys, nodes, extra, message):
    """Allocation shares of no GPUs read 100000 % before."""
    code = simulate(
        tmp_path, lines(*PODS), *extra, nodes="sn,cpu_milli,memory_mib,gpu,model\n" + nodes
    )

    assert (2, True) == (code, message in capsys.readouterr().err)
