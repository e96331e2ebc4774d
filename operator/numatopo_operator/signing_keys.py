"""The operator's signing key and the public keys it trusts, read from their files (I/O)."""

from __future__ import annotations

import logging
from pathlib import Path

from numatopo_engine.signing import Signer, SigningKeyError, Verifier
from numatopo_operator.settings import OperatorSettings, SettingsError

logger = logging.getLogger(__name__)


def load_keys(settings: OperatorSettings) -> tuple[Signer, Verifier]:
    """(signer, verifier) from `signing_key_file` and `trusted_keys_file`; SettingsError
    saying what is missing or wrong (never an assignment the agents would not enforce)."""
    if not settings.signing_key_file:
        raise SettingsError(
            "no signing key: set NUMATOPO_SIGNING_KEY_FILE (--signing-key-file) to a PEM "
            "Ed25519 private key (the chart mounts one; by hand: `openssl genpkey "
            "-algorithm ed25519 -out key.pem`, and give the node agents its public half)"
        )
    try:
        signer = Signer.from_pem(_read(settings.signing_key_file, "signing key"))
    except SigningKeyError as exc:
        raise SettingsError(f"signing key {settings.signing_key_file}: {exc}") from None
    verifier = signer.verifier()
    if settings.trusted_keys_file:
        try:
            trusted = Verifier.from_pem(_read(settings.trusted_keys_file, "trusted keys"))
        except SigningKeyError as exc:
            raise SettingsError(f"trusted keys {settings.trusted_keys_file}: {exc}") from None
        if signer.key_id not in trusted.keys:
            # The chart gives the agents this file: a public half copied from another key
            # (`signing.trustedKeys`) makes every agent refuse every assignment. By hand
            # it may hold only previous keys, so this is said, not refused.
            logger.warning(
                "the signing key's public half (key id %s) is not among the trusted keys in "
                "%s: node agents that trust only that file refuse every assignment this "
                "operator writes (compare with `openssl pkey -in KEY -pubout`)",
                signer.key_id,
                settings.trusted_keys_file,
            )
        verifier = verifier.with_keys(trusted)
    return signer, verifier


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read the {what} at {path}: {exc}") from None
