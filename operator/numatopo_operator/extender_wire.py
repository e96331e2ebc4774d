"""What the extender reads off the network, checked before any of it is used (pure).

kube-scheduler sends UTF-8 JSON objects of a known shape (keys read case-insensitively, as
Go's encoding/json does); anything else is answered with an Error naming what was wrong:

- a body above `MAX_BODY_BYTES`, not UTF-8, nested deeper than `MAX_DEPTH`, not JSON or
  not an object is refused before (or while) it is parsed;
- ExtenderArgs must hold a Pod object whose `metadata` and `spec` are objects, and its
  candidates as a list of names (`NodeNames`) or of Node objects with string names;
- ExtenderBindingArgs must name a pod (DNS-1123 subdomain), its namespace (a label), its
  uid and a node (a subdomain): nothing with `/`, `..`, NUL or a surrogate ever reaches a
  URL (`numatopo_kube` refuses such names again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from pydantic import BaseModel, ConfigDict

from numatopo_engine import kube_names

# 5,000 node names of 253 characters are 1.2 MiB, a pod ~1.5 MiB at most (etcd): both fit
# three times over (test_extender_attacks.py); Node objects fit for a few hundred nodes.
MAX_BODY_BYTES = 8 << 20
# A Pod nests under 20 levels; Python's parser hits its recursion limit near 1,000.
MAX_DEPTH = 100

# Everything but quotes and brackets: what the depth check drops first.
_NOT_SKELETON = bytes(b for b in range(256) if b not in b'"[]{}')
_STEPS = np.zeros(256, dtype=np.int32)
_STEPS[[ord("["), ord("{")]] = 1
_STEPS[[ord("]"), ord("}")]] = -1


# msgspec first: the same objects as `json.loads` at a third of the time; what it refuses
# goes to `_python_parsed`.
_decode = msgspec.json.Decoder().decode


class BadArgsError(ValueError):
    """The request body is not the JSON kube-scheduler sends."""


def _nests_too_deep(body: bytes) -> bool:
    """Whether arrays and objects nest deeper than `MAX_DEPTH` (brackets inside strings
    left out), linear and in C. Escaped backslashes go first, then escaped quotes, so every
    quote left opens or closes a string."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return False  # it cannot nest deeper than it opens, inside strings or not
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = b"".join(unescaped.translate(None, _NOT_SKELETON).split(b'"')[::2])
    if skeleton.count(b"[") + skeleton.count(b"{") <= MAX_DEPTH:
        return False  # it cannot nest deeper than it opens
    return int(np.cumsum(_STEPS[np.frombuffer(skeleton, dtype=np.uint8)]).max()) > MAX_DEPTH


def parse_body(body: bytes) -> Mapping[str, Any]:
    """The JSON object in `body`; `BadArgsError` for anything else."""
    if len(body) > MAX_BODY_BYTES:
        raise BadArgsError(f"request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadArgsError(f"request body is not UTF-8 (byte {exc.start})") from None
    if _nests_too_deep(body):
        raise BadArgsError(f"request body nests deeper than {MAX_DEPTH} levels")
    try:
        parsed = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        parsed = _python_parsed(text)
    if not isinstance(parsed, dict):
        raise BadArgsError("request body is not a JSON object")
    return parsed


def _python_parsed(text: str) -> Any:
    """`json.loads(text)` for what msgspec refuses: it reads a few things msgspec does not
    (NaN, lone surrogate escapes; later checks refuse them where they matter, by field),
    and its messages say what is wrong."""
    try:
        return json.loads(text)
    except RecursionError:
        raise BadArgsError(f"request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadArgsError(f"request body is not JSON: {exc}") from None


def field(args: Mapping[str, Any], name: str) -> Any:
    """Go's json decoding: an exact key first, else one that matches ignoring case."""
    if name in args:
        return args[name]
    lowered = name.lower()
    return next((value for key, value in args.items() if key.lower() == lowered), None)


def _object_name(item: object) -> str | None:
    metadata = item.get("metadata") if isinstance(item, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


def node_names(args: Mapping[str, Any]) -> tuple[list[str], list[Any] | None]:
    """Candidate node names, and the Node objects when the scheduler sent objects."""
    names = field(args, "NodeNames")
    if names is not None:
        # JSON strings parse to `str` itself: one pass in C over thousands of names.
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise BadArgsError("ExtenderArgs.NodeNames is not a list of names")
        return names, None
    nodes = field(args, "Nodes")
    if nodes is None:
        return [], None
    items = nodes.get("items") if isinstance(nodes, Mapping) else None
    if not isinstance(items, list):
        raise BadArgsError("ExtenderArgs.Nodes is not a NodeList")
    found = [_object_name(item) for item in items]
    if None in found:
        raise BadArgsError("ExtenderArgs.Nodes holds an item that is not a Node with a name")
    return [name for name in found if name is not None], items


def pod(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Pod of ExtenderArgs: an object whose metadata and spec are objects."""
    found = field(args, "Pod")
    if not isinstance(found, Mapping):
        raise BadArgsError("ExtenderArgs has no Pod object")
    for part in ("metadata", "spec"):
        if not isinstance(found.get(part, {}), Mapping):
            raise BadArgsError(f"ExtenderArgs.Pod.{part} is not an object")
    return found


@dataclass(frozen=True, slots=True)
class BindingArgs:
    """ExtenderBindingArgs, every name valid."""

    namespace: str
    name: str
    uid: str
    node: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def binding_args(body: Mapping[str, Any]) -> BindingArgs:
    """ExtenderBindingArgs; `BadArgsError` naming the first field missing or invalid."""
    namespace, name, uid, node = (
        field(body, key) for key in ("PodNamespace", "PodName", "PodUID", "Node")
    )
    problem = (
        kube_names.name_problem("PodNamespace", namespace, label=True)
        or kube_names.name_problem("PodName", name)
        or kube_names.name_problem("Node", node)
    )
    if problem:
        raise BadArgsError(f"ExtenderBindingArgs: {problem}")
    if not kube_names.is_uid(uid):
        raise BadArgsError(
            "ExtenderBindingArgs: PodUID is missing or not a uid (kube-scheduler always sends "
            "the pod's uid)"
        )
    return BindingArgs(namespace, name, uid, node)


class HostPriority(BaseModel):
    """One entry of HostPriorityList (prioritize's answer): a node and its score (0..10)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    Host: str
    Score: int


# `HostPriority` as a msgspec Struct for writing the answer (hundreds of hosts): built and
# encoded in C, half what a dict per host costs.
HostPriorityRow: type[msgspec.Struct] = msgspec.defstruct(
    "HostPriorityRow",
    [(name, info.annotation) for name, info in HostPriority.model_fields.items()],
)
