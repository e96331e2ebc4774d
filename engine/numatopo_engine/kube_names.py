"""Kubernetes object names, as the API server validates them (pure).

A name that reaches a URL path must be one the API server could have given an object: anything else
(`..`, `/`, `%`, NUL, a lone surrogate, an upper-case letter) is refused before it is used, by the
extender (names from the network) and again by the client layer (any caller). The rules are
apimachinery's `validation.IsDNS1123Label` and `IsDNS1123Subdomain`: pod and node names are
subdomains, namespaces are labels.
"""

from __future__ import annotations

import re

LABEL_MAX_CHARS = 63
SUBDOMAIN_MAX_CHARS = 253
# An API server's uids are RFC 4122 UUIDs (36 characters); emulators give shorter ones.
UID_MAX_CHARS = 64

# `fullmatch`, never `$`: `$` also matches before a trailing newline.
_LABEL_TEXT = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_LABEL = re.compile(_LABEL_TEXT, re.ASCII)
_SUBDOMAIN = re.compile(rf"{_LABEL_TEXT}(?:\.{_LABEL_TEXT})*", re.ASCII)
_UID = re.compile(r"[0-9A-Za-z-]+", re.ASCII)
# A label key's name part and a label value: alphanumeric at both ends, `-_.` inside.
_QUALIFIED = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)


def is_label(name: object) -> bool:
    """A DNS-1123 label (a namespace): lower-case letters, digits, `-`, at most 63."""
    return isinstance(name, str) and len(name) <= LABEL_MAX_CHARS and bool(_LABEL.fullmatch(name))


def is_subdomain(name: object) -> bool:
    """A DNS-1123 subdomain (a pod's or a node's name): labels joined by `.`, at most 253."""
    return (
        isinstance(name, str)
        and len(name) <= SUBDOMAIN_MAX_CHARS
        and bool(_SUBDOMAIN.fullmatch(name))
    )


def is_uid(uid: object) -> bool:
    """The shape of a `metadata.uid`: letters, digits and `-`, at most 64."""
    return isinstance(uid, str) and len(uid) <= UID_MAX_CHARS and bool(_UID.fullmatch(uid))


def name_problem(what: str, name: object, *, label: bool = False) -> str:
    """'' when `name` is a valid subdomain (a label with `label`), else why not, with the name shown
    escaped (`ascii`), so that no control character or surrogate is echoed."""
    if is_label(name) if label else is_subdomain(name):
        return ""
    if not isinstance(name, str) or not name:
        return f"{what} is missing"
    rule, limit, chars = (
        ("DNS-1123 label", LABEL_MAX_CHARS, "a-z, 0-9, '-'")
        if label
        else ("DNS-1123 subdomain", SUBDOMAIN_MAX_CHARS, "a-z, 0-9, '-', '.'")
    )
    shown = ascii(name[:limit]) + ("..." if len(name) > limit else "")
    return f"{what} {shown} is not a valid name (a {rule}: {chars}, at most {limit})"


def is_qualified_name(key: object) -> bool:
    """A label key (`IsQualifiedName`): `[prefix/]name`, the prefix a DNS-1123 subdomain, the name
    at most 63 of letters, digits, `-_.`, alphanumeric at both ends."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    if slash and not is_subdomain(prefix):
        return False
    return len(name) <= LABEL_MAX_CHARS and bool(_QUALIFIED.fullmatch(name))


def is_label_value(value: object) -> bool:
    """A label value (`IsValidLabelValue`): empty, or a qualified name's name part."""
    return isinstance(value, str) and (
        value == "" or (len(value) <= LABEL_MAX_CHARS and bool(_QUALIFIED.fullmatch(value)))
    )
