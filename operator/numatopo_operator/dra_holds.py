"""What DRA holds (pure): the devices every allocated ResourceClaim names, as GPUs and NICs
of the node's model (`numatopo_engine.dra.join`), kept current from the watches
(`dra_feed`) and booked in the ledger (`Ledger.set_dra_holds`); every allocated claim
counts, and pods come first: docs/DESIGN.md, "GPUs on DRA clusters", step 4.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from numatopo_engine.annotations import Assignment, ContainerAssignment
from numatopo_engine.cpuset import CPUSet
from numatopo_engine.dra import api
from numatopo_engine.dra.allocated import allocation_results
from numatopo_engine.dra.extended import extended_names
from numatopo_engine.dra.join import DeviceId, DraNode, dra_devices, join_node
from numatopo_engine.model import DraDevices, NumatopologySpec, UnhealthyDevices
from numatopo_engine.state import NodeState

if TYPE_CHECKING:
    from numatopo_operator.ledger import Ledger

logger = logging.getLogger(__name__)

HELD = "numatopo.io/dra-claim:"
"""The prefix of a hold's key in a node's state (never a pod key: those hold no colon)."""

HOLDER = "dra"
"""The container name a hold books its devices under."""


def allocated_devices(raw: Mapping[str, Any]) -> tuple[DeviceId, ...]:
    """The devices a claim's `status.allocation` names (none when unallocated), read field
    by field (`allocation_results`): a claim holds them whatever else it says, modelled or not."""
    return tuple(sorted({device for _, device in allocation_results(raw) or ()}))


def claim_key(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def holds_on(node: DraNode, claims: Mapping[str, Iterable[DeviceId]]) -> dict[str, Assignment]:
    """Claim key -> the GPUs, NICs and CPUs of `node` its allocation names (claims naming
    none of them left out), as one container (exclusive only for its CPUs)."""
    by_id = node.by_id()
    holds = {}
    for key, devices in sorted(claims.items()):
        joined = [by_id[d] for d in devices if d in by_id]
        gpus = sorted(d.gpu for d in joined if d.gpu is not None)
        nics = sorted(d.nic for d in joined if d.nic is not None)
        cpus = CPUSet(d.cpu for d in joined if d.cpu is not None)
        if gpus or nics or cpus:
            held = ContainerAssignment(gpu_indices=gpus, nics=nics, cpus=cpus, exclusive=bool(cpus))
            holds[HELD + key] = Assignment(node=node.node, containers={HOLDER: held})
    return holds


def book_holds(state: NodeState, holds: Mapping[str, Assignment]) -> None:
    """Book each hold's still-free devices in `state` (pods come first: book them before)."""
    for key, hold in sorted(holds.items()):
        free_gpus, free_nics, free_cpus = state.free_gpus(), state.free_nics(), state.free_cpus()
        containers = {
            name: container.model_copy(
                update={
                    "gpu_indices": [g for g in container.gpu_indices if g in free_gpus],
                    "nics": [n for n in container.nics if n in free_nics],
                    "cpus": CPUSet(c for c in container.cpus if c in free_cpus),
                }
            )
            for name, container in hold.containers.items()
        }
        if any(c.gpu_indices or c.nics or c.cpus for c in containers.values()):
            state.apply(key, hold.model_copy(update={"containers": containers}))


@dataclass
class DraHolds:
    """The watched claims and slices, and the holds pushed to the ledger per node."""

    claims: dict[str, tuple[DeviceId, ...]] = field(default_factory=dict)
    """Allocated claims: key -> the devices its allocation names."""
    bodies: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Every claim as last watched: key -> its body (the extender judges pods by them)."""
    classes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Every DeviceClass as last watched: name -> its body."""
    slices: dict[str, api.ResourceSlice] = field(default_factory=dict)
    """name -> slice (of a node: `spec.nodeName` set)."""
    reported: dict[str, UnhealthyDevices] = field(default_factory=dict)
    """node -> the devices its agent reported unhealthy (`status.unhealthy`)."""
    _joined: dict[str, tuple[NumatopologySpec, DraNode]] = field(default_factory=dict)
    _class_generation: int = 0  # counts the DeviceClass events: `extended` is kept per one
    _read_classes: tuple[int, list[api.DeviceClass]] = (-1, [])
    _extended: dict[str, tuple[DraNode, int, dict[DeviceId, tuple[str, ...]]]] = field(
        default_factory=dict
    )
    _on_node: dict[str, set[str]] = field(default_factory=dict)  # node -> slice names
    _pools: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    """(driver, pool) -> node -> how many of its slices name that node."""
    _by_pool: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """(driver, pool) -> the allocated claims naming a device of it."""

    # -- what the watches say -----------------------------------------------------------

    def claim_seen(self, deleted: bool, raw: Mapping[str, Any]) -> set[str]:
        """A claim's event; returns the nodes whose holds may have changed."""
        key = claim_key(raw)
        if deleted:
            self.bodies.pop(key, None)
        else:
            self.bodies[key] = raw
        before = self._set_claim(key, () if deleted else allocated_devices(raw))
        devices = self.claims.get(key, ())
        return self._nodes_of(before) | self._nodes_of(devices) if before != devices else set()

    def claims_listed(self, items: Iterable[Mapping[str, Any]]) -> set[str]:
        """A fresh list replaces every claim; returns the nodes that may have changed."""
        listed = {claim_key(raw): raw for raw in items}
        nodes: set[str] = set()
        for key in self.bodies.keys() - listed.keys():
            nodes |= self.claim_seen(True, self.bodies[key])
        for raw in listed.values():
            nodes |= self.claim_seen(False, raw)
        return nodes

    def _set_claim(self, key: str, devices: tuple[DeviceId, ...]) -> tuple[DeviceId, ...]:
        """Record what claim `key` holds now (indexed by pool); returns what it held."""
        before = self.claims.pop(key, ())
        for pool in {(d.driver, d.pool) for d in before}:
            keys = self._by_pool.get(pool, set())
            keys.discard(key)
            if not keys:
                self._by_pool.pop(pool, None)
        if devices:
            self.claims[key] = devices
            for pool in {(d.driver, d.pool) for d in devices}:
                self._by_pool.setdefault(pool, set()).add(key)
        return before

    def slice_seen(self, deleted: bool, raw: Mapping[str, Any]) -> set[str]:
        """A slice's event; returns the node whose devices may have changed."""
        name = str((raw.get("metadata") or {}).get("name"))
        old = self._remove(name)
        nodes = {old.spec.node_name} if old is not None and old.spec.node_name else set()
        if not deleted:
            read = _read(api.ResourceSlice, raw, "its devices are not joined")
            if read is not None and read.spec.node_name:
                self._add(read)
                nodes.add(read.spec.node_name)
        for node in nodes:
            self._joined.pop(node, None)
        return nodes

    def slices_listed(self, items: Iterable[Mapping[str, Any]]) -> set[str]:
        nodes = set(self._on_node)
        self.slices, self._on_node, self._pools = {}, {}, {}
        for raw in items:
            nodes |= self.slice_seen(False, raw)
        self._joined.clear()
        return nodes

    def _add(self, read: api.ResourceSlice) -> None:
        node = read.spec.node_name or ""
        self.slices[read.metadata.name] = read
        self._on_node.setdefault(node, set()).add(read.metadata.name)
        self._pools.setdefault((read.spec.driver, read.spec.pool.name), Counter())[node] += 1

    def _remove(self, name: str) -> api.ResourceSlice | None:
        old = self.slices.pop(name, None)
        if old is None:
            return None
        node = old.spec.node_name or ""
        self._on_node.get(node, set()).discard(name)
        if not self._on_node.get(node):
            self._on_node.pop(node, None)
        pool = (old.spec.driver, old.spec.pool.name)
        nodes = self._pools.get(pool, Counter())
        nodes[node] -= 1
        if nodes[node] <= 0:
            del nodes[node]
        if not nodes:
            self._pools.pop(pool, None)
        return old

    def class_seen(self, deleted: bool, raw: Mapping[str, Any]) -> set[str]:
        """A DeviceClass's event (no node's holds depend on it; `extended` may)."""
        name = str((raw.get("metadata") or {}).get("name"))
        if deleted:
            self.classes.pop(name, None)
        else:
            self.classes[name] = raw
        self._class_generation += 1
        return set()

    def classes_listed(self, items: Iterable[Mapping[str, Any]]) -> set[str]:
        self.classes = {str((raw.get("metadata") or {}).get("name")): raw for raw in items}
        self._class_generation += 1
        return set()

    # -- what the ledger books -----------------------------------------------------------

    def joined(self, node: str, topology: NumatopologySpec | None) -> DraNode | None:
        """The node's slices joined with `topology` (cached until either changes)."""
        if topology is None:
            return None
        cached = self._joined.get(node)
        if cached is not None and (cached[0] is topology or cached[0] == topology):
            return cached[1]
        names = self._on_node.get(node)
        if not names:
            return None  # most nodes, on every event of their Numatopology: no scan
        local = [self.slices[name] for name in sorted(names)]
        joined = join_node(node, topology, local)
        self._joined[node] = (topology, joined)
        return joined

    def device_classes(self) -> list[api.DeviceClass]:
        """The watched DeviceClasses that read as the model (read once per change)."""
        generation = self._class_generation
        if self._read_classes[0] != generation:
            read = (
                _read(api.DeviceClass, raw, "it names no extended resource")
                for raw in self.classes.values()
            )
            self._read_classes = (generation, [c for c in read if c])
        return self._read_classes[1]

    def extended(
        self, node: str, topology: NumatopologySpec | None
    ) -> dict[DeviceId, tuple[str, ...]]:
        """The node's GPUs and NICs DeviceClasses serve as extended resources -> those
        (`numatopo_engine.dra.extended`); the same object until the join or a class changes."""
        joined = self.joined(node, topology)
        if joined is None:
            return {}
        generation = self._class_generation
        cached = self._extended.get(node)
        if cached is not None and cached[0] is joined and cached[1] == generation:
            return cached[2]
        names = extended_names(joined, self.device_classes())
        self._extended[node] = (joined, generation, names)
        return names

    def status_of(self, node: str, topology: NumatopologySpec | None) -> DraDevices | None:
        """`status.dra` of the node: its GPUs, NICs and CPUs that DRA drivers publish."""
        joined = self.joined(node, topology)
        return dra_devices(joined) if joined is not None else None

    def unhealthy(
        self, node: str, topology: NumatopologySpec, reported: UnhealthyDevices
    ) -> UnhealthyDevices:
        """What the agent `reported` the kubelet cannot hand out, less the DRA devices (no
        device plugin lists those, which says nothing of their health)."""
        self.reported[node] = reported
        joined = self.joined(node, topology)
        if joined is None:
            return reported
        gpus, nics = joined.of_gpu(), joined.of_nic()
        return UnhealthyDevices(
            gpus=[g for g in reported.gpus if g not in gpus],
            nics=[n for n in reported.nics if n not in nics],
        )

    def sync(self, ledger: Ledger, node: str) -> bool:
        """Book what claims hold on `node` now, and the unhealthy devices less DRA ones, in
        `ledger`; True when the holds changed."""
        topology = ledger.topology(node)
        if topology is not None and node in self.reported:
            unhealthy = self.unhealthy(node, topology, self.reported[node])
            if ledger.unhealthy(node) != unhealthy:
                ledger.set_topology(node, topology, unhealthy)
        joined = self.joined(node, topology)
        holds = holds_on(joined, self._claims_on(node)) if joined is not None else {}
        if dict(ledger.dra_holds(node)) == holds:
            return False
        ledger.set_dra_holds(node, holds)
        return True

    def _claims_on(self, node: str) -> dict[str, tuple[DeviceId, ...]]:
        """The allocated claims naming a pool the node's slices publish."""
        pools = {
            (self.slices[name].spec.driver, self.slices[name].spec.pool.name)
            for name in self._on_node.get(node, ())
        }
        keys = set().union(*(self._by_pool.get(pool, set()) for pool in pools))
        return {key: self.claims[key] for key in keys}

    def _nodes_of(self, devices: Iterable[DeviceId]) -> set[str]:
        pools = {(d.driver, d.pool) for d in devices}
        return {node for pool in pools for node in self._pools.get(pool, {})}


_M = TypeVar("_M", bound=pydantic.BaseModel)


def _read(model: type[_M], raw: Mapping[str, Any], unread: str) -> _M | None:
    """`raw` as `model`; None when unreadable, with a warning of what is lost (`unread`)."""
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as exc:
        name = (raw.get("metadata") or {}).get("name")
        logger.warning("%s %s is unreadable; %s: %s", model.__name__, name, unread, exc)
        return None
