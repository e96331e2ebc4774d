"""What the extender accepts off the network, checked without a server: the depth bound is
exact (brackets inside strings and escapes do not count), shapes and names are refused
with the field that was wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest

from numatopo_operator.extender_wire import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    BadArgsError,
    BindingArgs,
    binding_args,
    node_names,
    parse_body,
    pod,
)


def nested(depth: int) -> dict[str, Any]:
    """An object nesting exactly `depth` levels (itself the first)."""
    value: Any = "leaf"
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return {"k": value}


@pytest.mark.parametrize("depth", [1, 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_nesting_up_to_the_bound_is_read(depth: int) -> None:
    body = json.dumps(nested(depth)).encode()

    assert nested(depth) == parse_body(body)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 100_000])
def test_nesting_beyond_the_bound_is_refused(depth: int) -> None:
    body = ('{"k":' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}").encode()

    with pytest.raises(BadArgsError, match=f"nests deeper than {MAX_DEPTH} levels"):
        parse_body(body)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 500,
        "{" * 500 + "\\" + '"' + "[" * 500,
        '\\\\"' + "[" * 10,  # an escaped backslash, then a real quote
        "x" + '\\"[' * 300,
    ],
)
def test_brackets_inside_strings_do_not_count(text: str) -> None:
    document = {"Pod": {"metadata": {"annotations": {"a": text, "b": "]" * 200}}}, "k": [[[]]]}

    assert document == parse_body(json.dumps(document).encode())


def test_many_shallow_containers_are_not_deep() -> None:
    document = {"NodeNames": [], "items": [{"a": [1]} for _ in range(5000)]}

    assert document == parse_body(json.dumps(document).encode())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'"\xff"', "not UTF-8 \\(byte 1\\)"),
        (b"x" * (MAX_BODY_BYTES + 1), "larger than"),
        (b'{"a": 1} {"b": 2}', "not JSON"),
    ],
)
def test_bodies_that_are_no_json_object(body: bytes, message: str) -> None:
    with pytest.raises(BadArgsError, match=message):
        parse_body(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"PodName": "job\\ud800", "a": [1, 2.5, "\\u00e9", null, true]}',
        b'{"a": NaN, "b": -Infinity}',
        b'{"a": 1e999, "n": ' + b"9" * 40 + b"}",
    ],
)
def test_what_python_reads_is_read_the_same(body: bytes) -> None:
    """msgspec parses first and refuses lone surrogates, NaN and floats out of range;
    such bodies are read as `json.loads` reads them (the checks after it decide)."""
    assert repr(json.loads(body)) == repr(parse_body(body))


def test_node_names_in_either_form() -> None:
    assert (["a", "b"], None) == node_names({"nodenames": ["a", "b"]})
    items = [{"metadata": {"name": "a"}}]
    assert (["a"], items) == node_names({"Nodes": {"items": items}})
    assert ([], None) == node_names({"Nodes": None, "NodeNames": None})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"NodeNames": ["a", 1]}, "NodeNames is not a list of names"),
        ({"NodeNames": "a"}, "NodeNames is not a list of names"),
        ({"Nodes": {"items": ["a"]}}, "not a Node with a name"),
        ({"Nodes": {"items": [{"metadata": {"name": None}}]}}, "not a Node with a name"),
        ({"Nodes": ["a"]}, "Nodes is not a NodeList"),
    ],
)
def test_node_names_of_the_wrong_shape(args: dict[str, Any], message: str) -> None:
    with pytest.raises(BadArgsError, match=message):
        node_names(args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "has no Pod object"),
        ({"Pod": []}, "has no Pod object"),
        ({"Pod": {"metadata": []}}, "Pod.metadata is not an object"),
        ({"Pod": {"metadata": {}, "spec": "x"}}, "Pod.spec is not an object"),
    ],
)
def test_pod_of_the_wrong_shape(args: dict[str, Any], message: str) -> None:
    with pytest.raises(BadArgsError, match=message):
        pod(args)


def test_binding_args_read_case_insensitively() -> None:
    body = {"podnamespace": "ml", "PODNAME": "job-1", "PodUID": "uid-1", "node": "h100-a"}

    assert BindingArgs("ml", "job-1", "uid-1", "h100-a") == binding_args(body)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("PodNamespace", "", "PodNamespace is missing"),
        ("PodName", "a/../b", "PodName 'a/../b' is not a valid name"),
        ("Node", "n\x00", "Node 'n\\\\x00' is not a valid name"),
        ("PodUID", "", "PodUID is missing or not a uid"),
    ],
)
def test_binding_args_name_the_wrong_field(field: str, value: str, message: str) -> None:
    body = {"PodNamespace": "ml", "PodName": "job", "PodUID": "uid-1", "Node": "h100-a"}
    body[field] = value

    with pytest.raises(BadArgsError, match=f"^ExtenderBindingArgs: {message}"):
        binding_args(body)
