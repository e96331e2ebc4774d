"""Device selectors (CEL) judged as the scheduler's structured allocator judges them, or not at all.

The allocator (k8s.io/dynamic-resource-allocation/structured) evaluates the DeviceClass's selectors,
then the request's, against `device` = {driver, attributes[domain][id], capacity[domain][id]}; a
device matches when all are true. numatopo evaluates with cel-python, not cel-go, so only the subset
both read alike (`ALLOWED_FUNCTIONS`; no `capacity`, no version attributes: semver values in cel-go,
strings here), and any evaluation error refuses the request (docs/DESIGN.md, "GPUs on DRA
clusters", "Fail safe").
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from numatopo_engine.dra.api import Device, DeviceSelector
from numatopo_engine.dra.join import DraDevice

ALLOWED_FUNCTIONS = frozenset(
    {"startsWith", "endsWith", "contains", "size", "has", "exists", "all", "exists_one"}
)
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


class SelectorRefusedError(Exception):
    """numatopo cannot evaluate this selector as the scheduler would."""


def device_activation(driver: str, device: Device) -> dict[str, Any]:
    """The `device` variable of a selector, as a JSON value (version attributes left out; `_check`
    refuses expressions that could read them)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device.attributes.items():
        domain, _, ident = name.rpartition("/")
        if value.version is not None:
            continue
        attributes.setdefault(domain or driver, {})[ident] = value.value
    return {"driver": driver, "attributes": attributes}


def _check(expression: str, version_names: Iterable[str]) -> None:
    code = _STRING.sub('""', expression)
    for name in _CALL.findall(code):
        if name not in ALLOWED_FUNCTIONS:
            raise SelectorRefusedError(f"uses {name}(), which numatopo does not evaluate")
    if re.search(r"\bcapacity\b", code):
        raise SelectorRefusedError(
            "reads device capacity (quantities): numatopo does not evaluate it"
        )
    for name in version_names:
        if name in expression:
            raise SelectorRefusedError(
                f"may read version attribute {name}: numatopo does not evaluate it"
            )


@lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    environment = celpy.Environment()
    try:
        return environment.program(environment.compile(expression))
    except CELParseError as exc:
        raise SelectorRefusedError(f"does not compile: {exc}") from None


@dataclass
class Selectors:
    """Evaluates selectors against devices, caching per (expression, device)."""

    memo: dict[tuple[str, str, str], bool] = field(default_factory=dict)

    def matches(self, joined: DraDevice, *selectors: Iterable[DeviceSelector]) -> bool:
        """Whether the device passes every selector of each list, in order; raises
        SelectorRefusedError."""
        device, driver, key = joined.device, joined.id.driver, str(joined.id)
        versions = [n.rpartition("/")[2] for n, v in device.attributes.items() if v.version]
        for selector in itertools.chain.from_iterable(selectors):
            expression = selector.cel.expression
            memo_key = (expression, driver, key)
            if memo_key not in self.memo:
                self.memo[memo_key] = self._evaluate(expression, driver, device, versions)
            if not self.memo[memo_key]:
                return False
        return True

    @staticmethod
    def _evaluate(expression: str, driver: str, device: Device, versions: list[str]) -> bool:
        _check(expression, versions)
        activation: Mapping[str, Any] = {"device": json_to_cel(device_activation(driver, device))}
        try:
            result = _program(expression).evaluate(activation)
        except CELEvalError as exc:
            raise SelectorRefusedError(f"fails on device {device.name}: {exc.args[0]}") from None
        if isinstance(result, CELEvalError):
            raise SelectorRefusedError(f"fails on device {device.name}: {result.args[0]}")
        if not isinstance(result, celpy.celtypes.BoolType):
            raise SelectorRefusedError(
                f"gives {type(result).__name__}, not a bool, on {device.name}"
            )
        return bool(result)
