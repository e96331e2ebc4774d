"""Validate a pod's `numatopo.io/*` annotations into `TopologyOptions` (pure).

Annotations are user input typed by hand into YAML, so every problem becomes an
`InvalidRequestError` whose `field` is the annotation key and whose message says what was wrong,
what is allowed, and (for a misspelt word) the closest allowed one. Values are echoed back
shortened, so a 10,000-character value cannot flood an Event.

Defaults (DESIGN.md, "Pod annotations"): scope `pod`; smt `any`; gpu-links `preferred`;
max-numa-nodes unset (the policy decides); cpu `exclusive` when the pod could ask for it explicitly
(see `exclusive_cpu_problem`), else `numa`.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from numatopo_engine import annotations as keys
from numatopo_engine.annotations import CpuMode, GpuLinksMode, PolicyName, Scope, SmtMode
from numatopo_engine.errors import InvalidRequestError
from numatopo_engine.request import ContainerRequest, TopologyOptions

# Long enough to recognise any sensible value, short enough for one line of an Event.
ECHO_CHARS = 60
# kubelet's Topology Manager refuses machines above 8 NUMA nodes by default; 1024 is Linux's largest
# NODES_SHIFT (10), so no real machine needs more.
MAX_NUMA_NODES_LIMIT = 1024
# Written by the operator, not the user: present on every placed pod, never validated here.
OPERATOR_ANNOTATIONS = (
    keys.ASSIGNMENT, keys.STATE, keys.REASON, keys.OBSERVED, keys.GROUP_PLACEMENT,
)  # fmt: skip

_E = TypeVar("_E", bound=enum.StrEnum)
_DIGITS = re.compile(r"^[0-9]{1,7}$")


def shorten(text: str) -> str:
    """`text` cut to about `ECHO_CHARS` characters, saying how long it was."""
    if len(text) <= ECHO_CHARS:
        return text
    return text[:ECHO_CHARS] + f"... ({len(text)} characters)"


def echo(value: object) -> str:
    """A user-supplied value quoted for a message: shortened, or its type if not a string."""
    if isinstance(value, str):
        return repr(shorten(value))
    return f"<{type(value).__name__}>"


def _closest(word: str, allowed: Sequence[str]) -> str:
    """' (did you mean 'x'?)' for the closest allowed word, or '' when none is close."""
    matches = difflib.get_close_matches(word[:ECHO_CHARS].lower(), allowed, n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


def choice(values: Mapping[str, str], key: str, kind: type[_E], default: _E) -> _E:
    """`values[key]` as a `kind` (`default` when absent); InvalidRequestError names the closest."""
    if key not in values:
        return default
    text = values[key]
    allowed = [member.value for member in kind]
    if text in allowed:
        return kind(text)
    raise InvalidRequestError(
        key,
        f"{echo(text)} is not a valid value{_closest(text, allowed)}; allowed: "
        + ", ".join(allowed),
    )


def whole_number(key: str, text: str, limit: int) -> int:
    """`text` read as a whole number from 1 to `limit`; InvalidRequestError naming `key`."""
    allowed = f"a whole number from 1 to {limit}"
    if not _DIGITS.match(text):
        raise InvalidRequestError(key, f"{echo(text)} is not {allowed}")
    number = int(text)
    if not 1 <= number <= limit:
        raise InvalidRequestError(key, f"{number} is out of range; expected {allowed}")
    return number


def _max_numa_nodes(values: Mapping[str, str], policy: PolicyName) -> int | None:
    key = keys.MAX_NUMA_NODES
    if key not in values:
        return None
    count = whole_number(key, values[key], MAX_NUMA_NODES_LIMIT)
    if policy is PolicyName.SINGLE_NUMA_NODE and count != 1:
        raise InvalidRequestError(
            key, f"{count} contradicts policy single-numa-node, which allows exactly 1"
        )
    return count


def _user_values(raw: Mapping[object, object]) -> dict[str, str]:
    """The user-written `numatopo.io/*` annotations, stripped; unknown or non-string ones raise."""
    values: dict[str, str] = {}
    known = [*keys.USER_ANNOTATIONS, *keys.GROUP_ANNOTATIONS]
    for key, value in raw.items():
        # Keys that are not ours are other tools' business, whatever they hold.
        if not isinstance(key, str) or not key.startswith(keys.PREFIX):
            continue
        # Group annotations are validated by `groups.group_of`, where they are read.
        if key in OPERATOR_ANNOTATIONS or key in keys.GROUP_ANNOTATIONS:
            continue
        if key not in known:
            raise InvalidRequestError(
                shorten(key),
                f"unknown annotation{_closest(key, known)}; known: " + ", ".join(known),
            )
        if not isinstance(value, str):
            raise InvalidRequestError(
                key,
                f"annotation values must be strings, got {type(value).__name__} "
                "(quote the value in YAML)",
            )
        values[key] = value.strip()
    return values


def exclusive_cpu_problem(
    containers: Sequence[ContainerRequest], init_containers: Sequence[ContainerRequest]
) -> str | None:
    """Why the pod cannot have exclusive CPUs, or None: every app and sidecar container must ask a
    whole number of CPUs, at least one; a regular init container whole CPUs or none (it runs on CPUs
    booked for the app containers)."""
    for container in [*containers, *[c for c in init_containers if c.restartable]]:
        if container.integer_cpus is None:
            return _cpu_complaint(container, init=container.restartable)
    for container in init_containers:
        if not container.restartable and container.cpu_milli % 1000:
            return _cpu_complaint(container, init=True)
    return None


def _cpu_complaint(container: ContainerRequest, *, init: bool) -> str:
    where = "init container" if init else "container"
    asked = f"requests cpu {container.cpu_milli}m" if container.cpu_milli else "requests no cpu"
    return f"{where} {container.name!r} {asked}; exclusive CPUs need a whole number of CPUs"


def options_from_annotations(
    raw: Mapping[object, object],
    *,
    containers: Sequence[ContainerRequest],
    init_containers: Sequence[ContainerRequest] = (),
) -> TopologyOptions:
    """Validate the `numatopo.io/*` annotations of a pod whose containers are given; raises
    `InvalidRequestError` (field = the annotation key) for unknown annotations, non-string or
    misspelt values, out-of-range counts and contradictions (`cpu: exclusive` with fractional CPUs,
    `smt: full-cores` without exclusive CPUs, `max-numa-nodes` above 1 with `single-numa-node`)."""
    values = _user_values(raw)
    policy = choice(values, keys.POLICY, PolicyName, PolicyName.NONE)
    scope = choice(values, keys.SCOPE, Scope, Scope.POD)
    problem = exclusive_cpu_problem(containers, init_containers)
    default_cpu = CpuMode.NUMA if problem else CpuMode.EXCLUSIVE
    cpu = choice(values, keys.CPU, CpuMode, default_cpu)
    if cpu is CpuMode.EXCLUSIVE and problem:
        raise InvalidRequestError(
            keys.CPU, f"'exclusive' is not possible: {problem} (or use 'numa')"
        )
    smt = choice(values, keys.SMT, SmtMode, SmtMode.ANY)
    if smt is SmtMode.FULL_CORES and cpu is not CpuMode.EXCLUSIVE:
        raise InvalidRequestError(
            keys.SMT, f"'full-cores' places exclusive CPUs only, but cpu is {cpu.value!r}"
        )
    gpu_links = choice(values, keys.GPU_LINKS, GpuLinksMode, GpuLinksMode.PREFERRED)
    return TopologyOptions(policy, scope, cpu, smt, gpu_links, _max_numa_nodes(values, policy))
