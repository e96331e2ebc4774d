"""One test signing key pair (the operator's), and helpers that sign as the operator does.

Tests that hand-write an assignment the operator would have written sign it with
`signed_annotation`; tests of forged claims leave it unsigned or copy it to another pod.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from numatopo_engine.annotations import Assignment
from numatopo_engine.signing import PodIdentity, Signer, Verifier

__all__ = ["KEY_FILE", "PUBLIC_PEM", "SIGNER", "VERIFIER", "sign_for", "signed_annotation"]

_PRIVATE = Ed25519PrivateKey.generate()
SIGNER = Signer(_PRIVATE)
VERIFIER: Verifier = SIGNER.verifier()
PUBLIC_PEM = _PRIVATE.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)
KEY_FILE = str(Path(tempfile.mkdtemp(prefix="numatopo-test-key-")) / "key.pem")
Path(KEY_FILE).write_bytes(
    _PRIVATE.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
)


def _identity(pod: Mapping[str, Any]) -> PodIdentity:
    meta = pod.get("metadata") or {}
    return PodIdentity(
        str(meta.get("uid", "")), f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
    )


def sign_for(pod: Mapping[str, Any], assignment: Assignment) -> Assignment:
    return SIGNER.sign(assignment, _identity(pod))


def signed_annotation(pod: Mapping[str, Any], assignment: Assignment | str) -> str:
    """The assignment annotation the operator would write for `pod` (uid, namespace, name set)."""
    if isinstance(assignment, str):
        assignment = Assignment.model_validate_json(assignment)
    return sign_for(pod, assignment).to_annotation()
