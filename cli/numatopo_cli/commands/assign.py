"""`numatopo assign`: run the allocation engine once, offline, for one pod on one node.

Inputs (JSON or YAML; a file ending in `.json` must be JSON):
  --topology NODE   the node: the `Numatopology` object `numatopo inspect -o json`
                    prints, or just its `spec`
  --pod POD         a Pod manifest with `numatopo.io/*` annotations
  --allocated A     optional: what is already placed on the node, a list of
                    `numatopo.io/assignment` objects (or their JSON strings), or of
                    `{"pod": "ns/name", "assignment": ...}`; an entry for POD itself is
                    dropped, so the pod is placed afresh

Output on stdout, `-o json` (the default; `numatopo_cli.reports.assign.AssignReport`):
  {"apiVersion": "cli.numatopo.io/v1", "kind": "AssignReport",
   "fits": true, "assignment": {...}, "score": N}            exit 0
  {"apiVersion": ..., "kind": ..., "fits": false, "reason": "..."}   exit 1
`-o text` prints the same as a short summary. Invalid input (an unreadable or
malformed file, a node that does not validate, a pod with invalid annotations or
resources, allocations that double-book the node) prints nothing on stdout and
`numatopo assign: error: <what and where>` on stderr, exit 2: such a pod must be
fixed, it would not fit on any node.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
import yaml

from numatopo_cli.reports.assign import AssignReport
from numatopo_engine import allocation
from numatopo_engine.annotations import Assignment
from numatopo_engine.errors import InvalidRequestError, UnsatisfiableError
from numatopo_engine.model import Numatopology, NumatopologySpec
from numatopo_engine.pod_request import request_from_pod, wants_topology
from numatopo_engine.request import PodRequest
from numatopo_engine.resources import DEFAULT_RESOURCES, ResourceNames
from numatopo_engine.state import NodeState

PROG = "numatopo assign"
# Used when the node file is a bare spec and no --node-name is given.
DEFAULT_NODE_NAME = "node"
# Enough pydantic errors to locate a problem without burying it.
MAX_VALIDATION_ERRORS = 5


class InputError(Exception):
    """A problem with what the user passed; the message names the file and the place."""


def load_document(path: Path, shape: type, expected: str) -> Any:
    """The one JSON or YAML document in `path`, which must be a `shape` (`expected` names it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: cannot read: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if path.suffix == ".json":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: invalid JSON: {exc}") from None
    else:
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            problem = " ".join(str(exc).split())  # PyYAML's message spans lines
            raise InputError(f"{path}: invalid YAML: {problem}") from None
        if len(documents) != 1:
            raise InputError(f"{path}: expected one document, found {len(documents)}")
        document = documents[0]
    if not isinstance(document, shape):
        got = "nothing" if document is None else type(document).__name__
        raise InputError(f"{path}: expected {expected}, got {got}")
    return document


def read_topology(path: Path) -> tuple[NumatopologySpec, str | None]:
    """The node's spec and, for a whole `Numatopology` object, its name."""
    document = load_document(path, Mapping, "a Numatopology object or its spec")
    try:
        if "spec" in document or "kind" in document:
            node = Numatopology.model_validate(document)
            return node.spec, node.metadata.name
        return NumatopologySpec.model_validate(document), None
    except pydantic.ValidationError as exc:
        raise InputError(f"{path}: not a valid Numatopology: {_validation_summary(exc)}") from None


def read_allocated(path: Path) -> list[tuple[str, Assignment]]:
    """(pod key, assignment) pairs; an entry without a pod is keyed `allocated[i]`."""
    document = load_document(path, list, "a list of assignments")
    entries: list[tuple[str, Assignment]] = []
    for index, item in enumerate(document):
        where = f"{path}: [{index}]"
        key, raw = f"allocated[{index}]", item
        if isinstance(item, Mapping) and "assignment" in item:
            pod, raw = item.get("pod"), item["assignment"]
            if not isinstance(pod, str) or not pod:
                raise InputError(f"{where}: 'pod' must be a 'namespace/name' string")
            key = pod
        if isinstance(raw, str):
            # The annotation's value as it sits on a pod: JSON in a string.
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: assignment is not JSON: {exc}") from None
        try:
            entries.append((key, Assignment.model_validate(raw)))
        except pydantic.ValidationError as exc:
            raise InputError(
                f"{where}: not a valid assignment: {_validation_summary(exc)}"
            ) from None
    return entries


def read_pod(path: Path, resources: ResourceNames) -> PodRequest:
    document = load_document(path, Mapping, "a Pod manifest")
    if not wants_topology(document):
        print(
            f"{PROG}: note: {path} has no numatopo.io/policy annotation; deciding with policy none",
            file=sys.stderr,
        )
    try:
        return request_from_pod(document, resources)
    except InvalidRequestError as exc:
        raise InputError(f"{path}: invalid pod: {exc}") from None


def _validation_summary(exc: pydantic.ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = [
        f"{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}"
        for error in errors[:MAX_VALIDATION_ERRORS]
    ]
    more = len(errors) - MAX_VALIDATION_ERRORS
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def decide(
    topology: NumatopologySpec, state: NodeState, request: PodRequest, node_name: str
) -> AssignReport:
    """The answer: fits with assignment and score, or does not fit with the reason."""
    try:
        decision = allocation.allocate(topology, state, request, node_name)
    except UnsatisfiableError as exc:
        return AssignReport(fits=False, reason=exc.reason)
    except InvalidRequestError as exc:
        raise InputError(f"invalid pod: {exc}") from None
    return AssignReport(fits=True, assignment=decision.assignment, score=decision.score)


def render_text(answer: AssignReport, request: PodRequest, node_name: str) -> str:
    assignment = answer.assignment
    if assignment is None:
        return f"{request.key} does not fit on {node_name}: {answer.reason}\n"
    numa = ",".join(map(str, assignment.numa_nodes)) or "-"
    lines = [
        f"{request.key} fits on {assignment.node} (score {answer.score}): "
        f"policy {assignment.policy.value}, NUMA nodes {numa}"
    ]
    for name, container in assignment.containers.items():
        cpus = f"{container.cpus or '-'}" + ("" if container.exclusive else " (shared)")
        gpus = ",".join(map(str, container.gpu_indices)) or "-"
        nics = ",".join(container.nics) or "-"
        mig = f", mig {','.join(map(str, container.mig_indices))}" if container.mig_indices else ""
        lines.append(
            f"  {name}: cpus {cpus}, mems {container.mems or '-'}, gpus {gpus}{mig}, nics {nics}"
        )
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    resources = ResourceNames(
        gpu=tuple(args.gpu_resource or DEFAULT_RESOURCES.gpu),
        nic=tuple(args.nic_resource or DEFAULT_RESOURCES.nic),
    )
    try:
        topology, topology_name = read_topology(args.topology)
        request = read_pod(args.pod, resources)
        entries = read_allocated(args.allocated) if args.allocated else []
        state, rejected = NodeState.rebuild(topology, entries)
        if rejected:
            overlaps = "; ".join(map(str, rejected))
            raise InputError(f"{args.allocated}: allocations overlap: {overlaps}")
        state.release(request.key)
        node_name = args.node_name or topology_name or DEFAULT_NODE_NAME
        answer = decide(topology, state, request, node_name)
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.output == "text":
        sys.stdout.write(render_text(answer, request, node_name))
    else:
        sys.stdout.write(answer.to_json())
    return 0 if answer.fits else 1


HELP = "place one pod on one node with the allocation engine (offline)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--topology", type=Path, required=True, metavar="NODE", help="node file (JSON or YAML)")
    add("--pod", type=Path, required=True, metavar="POD", help="Pod manifest")
    add("--allocated", type=Path, metavar="A", help="assignments already on the node")
    add("-o", "--output", choices=("json", "text"), default="json")
    add("--node-name", help=f"node name (default: the object's name, else {DEFAULT_NODE_NAME!r})")
    add(
        "--gpu-resource",
        action="append",
        metavar="PATTERN",
        help="resource name (fnmatch pattern) counted as GPUs; repeatable "
        f"(default: {' '.join(DEFAULT_RESOURCES.gpu)})",
    )
    add(
        "--nic-resource",
        action="append",
        metavar="PATTERN",
        help="resource name (fnmatch pattern) counted as RDMA NICs; repeatable "
        f"(default: {' '.join(DEFAULT_RESOURCES.nic)})",
    )
