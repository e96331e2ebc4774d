"""kopf's diff base is left empty (`handlers.NoDiffBase`): right only while no handler of the
operator asks kopf what changed (on.create/update/delete/resume, on.field)."""

from __future__ import annotations

import kopf
import pytest

from numatopo_operator.handlers import NoDiffBase, build_registry


@pytest.mark.parametrize("groups", [True, False])
def test_no_handler_reads_the_diff_kopf_no_longer_builds(groups):
    registry = build_registry(groups=groups)

    assert [] == list(registry._changing.get_all_handlers())
    # With groups, the NetworkTopologies' event handler and index are kopf's; without,
    # kopf only logs in (the feeds follow pods, Numatopologies and Nodes).
    assert groups == bool(list(registry._watching.get_all_handlers()))


def test_the_essence_is_empty_and_nothing_is_stored():
    body = kopf.Body({"metadata": {"name": "n"}, "spec": {"cpus": list(range(208))}})
    storage = NoDiffBase()
    patch = kopf.Patch()

    storage.store(body=body, patch=patch, essence=storage.build(body=body))

    assert ({}, None, {}) == (storage.build(body=body), storage.fetch(body=body), dict(patch))
