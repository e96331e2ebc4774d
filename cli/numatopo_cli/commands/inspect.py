"""`numatopo inspect`: discover a node (or read saved topology files) and print it.

Output is a readable summary (`-o table`), or the `Numatopology` object itself
(`-o json|yaml`), which is the `NODE.json` that `numatopo assign` reads. `--svg` also
draws the node. `--sample NAME` reads one of the real machines shipped with numatopo,
for trying it without a cluster or a GPU. `--resource-slices FILE` (`kubectl get
resourceslices -o json`) says which GPUs and NICs DRA drivers publish for the node, by
driver and pool, as the operator writes it into `status.dra`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from importlib import resources
from pathlib import Path

import pydantic
import yaml

from numatopo_cli.render import svg, table
from numatopo_engine.dra.api import ResourceSlice
from numatopo_engine.dra.join import dra_devices, join_node
from numatopo_engine.model import Numatopology, NumatopologyStatus, ObjectMeta
from numatopo_exporter.discovery import discover
from numatopo_exporter.discovery.accelerator_flag import add_accelerator_flag
from numatopo_exporter.discovery.errors import DiscoveryError

PROG = "numatopo inspect"
SAMPLE_SUFFIX = ".txt"


def list_samples() -> dict[str, str]:
    """The embedded samples (saved `nvidia-smi topo -m` of real machines) by name, each with
    its file's `# system:` line."""
    found = {}
    for entry in resources.files("numatopo_cli").joinpath("samples").iterdir():
        if entry.name.endswith(SAMPLE_SUFFIX):
            lines = entry.read_text(encoding="utf-8").splitlines()
            system = next((line for line in lines if line.startswith("# system:")), "")
            found[entry.name.removesuffix(SAMPLE_SUFFIX)] = system.removeprefix("# system:").strip()
    return dict(sorted(found.items()))


@contextmanager
def sample_path(name: str) -> Iterator[Path]:
    """A file system path to the sample `name` (unpacked if numatopo runs from a zip)."""
    names = list(list_samples())
    if name not in names:
        raise DiscoveryError(
            f"unknown sample {name!r}; available: {', '.join(names)} (see --sample list)"
        )
    resource = resources.files("numatopo_cli").joinpath("samples", name + SAMPLE_SUFFIX)
    with resources.as_file(resource) as path:
        yield path


def _inspect(args: argparse.Namespace) -> tuple[Numatopology, list[str]]:
    with nullcontext() if args.sample is None else sample_path(args.sample) as path:
        topo = path or args.nvidia_smi_topo
        options = discover.DiscoverOptions.from_args(
            args, hwloc_xml=args.hwloc_xml, nvidia_smi_topo=topo
        )
        found = discover.discover(options)
    name = args.node_name or args.sample or socket.gethostname()
    topology = Numatopology(metadata=ObjectMeta(name=name), spec=found.spec)
    if args.resource_slices is not None:
        dra = dra_devices(join_node(name, found.spec, _read_slices(args.resource_slices)))
        topology = topology.model_copy(update={"status": NumatopologyStatus(dra=dra)})
    return topology, found.notices


def _read_slices(path: Path) -> list[ResourceSlice]:
    """ResourceSlices from JSON or YAML: a List (`kubectl get resourceslices`) or one slice."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise DiscoveryError(f"cannot read ResourceSlices: {error}", path) from None
    items = loaded.get("items") if isinstance(loaded, dict) and "items" in loaded else [loaded]
    try:
        return [ResourceSlice.model_validate(item) for item in items or []]
    except pydantic.ValidationError as error:
        raise DiscoveryError(f"not ResourceSlices of resource.k8s.io/v1: {error}", path) from None


def run(args: argparse.Namespace) -> int:
    if args.sample == "list":
        samples = list_samples()
        width = max(map(len, samples))
        lines = ["Samples (real machines; try `numatopo inspect --sample NAME`):"]
        lines += [f"  {name.ljust(width)}  {summary}" for name, summary in samples.items()]
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    try:
        topology, notices = _inspect(args)
        if args.svg is not None:
            _write_svg(args.svg, topology)
    except DiscoveryError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2

    if args.output == "table":
        # https://no-color.org: any non-empty NO_COLOR turns colour off.
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        sys.stdout.write(table.render_table(topology, notices=notices, color=color))
        return 0
    # Machine-readable output stays clean on stdout; the notices go to stderr.
    for notice in notices:
        print(f"{PROG}: notice: {notice}", file=sys.stderr)
    wire = topology.to_wire()
    if args.output == "json":
        sys.stdout.write(json.dumps(wire, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(wire, sort_keys=False, width=100))
    return 0


def _write_svg(path: Path, topology: Numatopology) -> None:
    try:
        path.write_text(svg.render_svg(topology), encoding="utf-8")
    except OSError as error:
        raise DiscoveryError(f"cannot write the diagram: {error.strerror}", path) from None
    print(f"{PROG}: wrote the diagram to {path}", file=sys.stderr)


HELP = "discover a node's NUMA/GPU/NIC topology and print it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    live = parser.add_argument_group("live node (default)")
    add_live = live.add_argument
    add_live(
        "--sysfs-root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="where the node's / is mounted (default: /)",
    )
    add_live("--no-nvml", action="store_true", help="do not ask the NVIDIA driver (NVML) for GPUs")
    add_live("--kubelet-config", type=Path, metavar="FILE", help="kubelet config file")
    add_accelerator_flag(live)
    add_live("--kubelet-state", type=Path, metavar="FILE", help="kubelet cpu_manager_state file")
    offline = parser.add_argument_group("saved files instead of a live node")
    offline.add_argument(
        "--hwloc-xml", type=Path, metavar="FILE", help="`lstopo --of xml` output of the node"
    )
    sources = offline.add_mutually_exclusive_group()
    sources.add_argument(
        "--nvidia-smi-topo", type=Path, metavar="FILE", help="`nvidia-smi topo -m` output"
    )
    sources.add_argument(
        "--sample",
        metavar="NAME",
        help="a real machine shipped with numatopo; `--sample list` lists them",
    )
    add("--node-name", metavar="NAME", help="node name (default: the hostname)")
    add(
        "--resource-slices",
        type=Path,
        metavar="FILE",
        help="ResourceSlices (`kubectl get resourceslices -o json`): show the node's DRA devices",
    )
    add(
        "-o",
        "--output",
        choices=("table", "yaml", "json"),
        default="table",
        help="table (default), or the Numatopology object as yaml or json",
    )
    add("--svg", type=Path, metavar="FILE", help="also draw the node as SVG")
