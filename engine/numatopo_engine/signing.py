"""Signed assignments: whoever can write a pod's annotations cannot forge a claim (pure).

Why, over what, and what an unverified assignment is: docs/DESIGN.md, "Pod annotations" (`sig`). The
signature is `ed25519:<key id>:<base64url>` in `Assignment.sig`; the key id (the first 16 hex digits
of the SHA-256 of the raw public key) picks the verifying key, so a verifier can trust the current
key and the previous one while keys rotate. Keys come as PEM: a private key for the signer; public
keys or X.509 certificates (only their public key is used: the chart carries the public half in a
self-signed certificate, Helm cannot derive it otherwise) for the verifier. Reading the PEM from a
file or the environment is the callers' I/O.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from numatopo_engine.annotations import Assignment

SCHEME = "ed25519"
# Bound to this use: a signature over these bytes cannot be replayed as anything else.
DOMAIN = b"numatopo.io/assignment/v1\n"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]+)-----\r?\n.*?-----END \1-----", re.DOTALL)


class SigningKeyError(ValueError):
    """PEM text that holds no usable Ed25519 key."""


class PodIdentity(NamedTuple):
    """The pod an assignment is for: the uid tells it from a later pod of the same name."""

    uid: str
    key: str  # `namespace/name`


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def canonical(assignment: Assignment, pod: PodIdentity) -> bytes:
    """The signed bytes: the pod and the assignment without `sig`, as sorted, compact JSON, so that
    the writer's and the reader's (parsed again) forms agree byte for byte."""
    content = assignment.model_dump(mode="json", by_alias=True, exclude={"sig"})
    body = {"pod": {"uid": pod.uid, "key": pod.key}, "assignment": content}
    return DOMAIN + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Signer:
    """The operator's private key."""

    private: Ed25519PrivateKey

    @classmethod
    def from_pem(cls, pem: bytes) -> Signer:
        try:
            private = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"not a PEM private key without a password: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise SigningKeyError(f"an Ed25519 key is needed, not {type(private).__name__}")
        return cls(private)

    @property
    def key_id(self) -> str:
        return key_id(self.private.public_key())

    def sign(self, assignment: Assignment, pod: PodIdentity) -> Assignment:
        """`assignment` with its signature for `pod` (a previous one is replaced)."""
        unsigned = assignment.model_copy(update={"sig": None})
        raw = self.private.sign(canonical(unsigned, pod))
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return assignment.model_copy(update={"sig": f"{SCHEME}:{self.key_id}:{text}"})

    def verifier(self, *others: Ed25519PublicKey) -> Verifier:
        """A verifier trusting this key's public half and `others` (previous keys)."""
        return Verifier.of(self.private.public_key(), *others)


@dataclass(frozen=True)
class Verifier:
    """The trusted public keys, by key id. `accept_unsigned` (an explicit insecure mode, for a
    cluster without keys) takes every assignment as it is."""

    keys: dict[str, Ed25519PublicKey] = field(default_factory=dict)
    accept_unsigned: bool = False

    @classmethod
    def of(cls, *keys: Ed25519PublicKey) -> Verifier:
        return cls({key_id(k): k for k in keys})

    @classmethod
    def from_pem(cls, pem: bytes) -> Verifier:
        """Every `PUBLIC KEY` and `CERTIFICATE` block of a PEM bundle; raises SigningKeyError when
        one is not Ed25519 or none is there."""
        found: list[Ed25519PublicKey] = []
        for block in _PEM_BLOCK.finditer(pem):
            kind, text = block.group(1), block.group(0)
            public: object
            try:
                if kind == b"CERTIFICATE":
                    public = x509.load_pem_x509_certificate(text).public_key()
                elif kind == b"PUBLIC KEY":
                    public = serialization.load_pem_public_key(text)
                else:
                    raise SigningKeyError(f"a {kind.decode()} block is no public key")
            except ValueError as exc:
                raise SigningKeyError(f"unreadable {kind.decode()} block: {exc}") from None
            if not isinstance(public, Ed25519PublicKey):
                raise SigningKeyError(f"an Ed25519 key is needed, not {type(public).__name__}")
            found.append(public)
        if not found:
            raise SigningKeyError("no PUBLIC KEY or CERTIFICATE block")
        return cls.of(*found)

    def with_keys(self, other: Verifier) -> Verifier:
        return Verifier({**self.keys, **other.keys}, self.accept_unsigned)

    def problem(self, assignment: Assignment, pod: PodIdentity) -> str:
        """Why `assignment` is no claim of `pod` ('' when its signature verifies)."""
        if self.accept_unsigned:
            return ""
        if assignment.sig is None:
            return "the assignment is not signed by the numatopo operator"
        scheme, _, rest = assignment.sig.partition(":")
        kid, _, text = rest.partition(":")
        public = self.keys.get(kid) if scheme == SCHEME else None
        if public is None:
            return (
                f"the assignment is signed with key {kid[:16]!r}, not one the "
                "numatopo operator signs with"
            )
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            public.verify(raw, canonical(assignment, pod))
        except (InvalidSignature, ValueError):
            return (
                "the assignment's signature does not match this pod and assignment (copied "
                "from another pod, or changed after the operator wrote it)"
            )
        return ""
