"""The operator's keys at start (`signing_keys.load_keys`): a trusted-keys file that
leaves out the signing key's own public half is said out loud, since agents given the
same file (as the chart gives it) would refuse everything the operator signs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import signing_keys
from numatopo_engine.signing import key_id
from numatopo_operator.settings import OperatorSettings, SettingsError
from numatopo_operator.signing_keys import load_keys


def public_pem(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def settings_with(trusted: bytes, folder: Path) -> OperatorSettings:
    path = folder / "trusted.pem"
    path.write_bytes(trusted)
    return OperatorSettings(signing_key_file=signing_keys.KEY_FILE, trusted_keys_file=str(path))


def test_a_trusted_file_with_the_own_key_says_nothing(tmp_path, caplog):
    previous = Ed25519PrivateKey.generate()
    caplog.set_level(logging.WARNING)

    signer, verifier = load_keys(
        settings_with(signing_keys.PUBLIC_PEM + public_pem(previous), tmp_path)
    )

    assert [] == [r.getMessage() for r in caplog.records]
    assert {signer.key_id, key_id(previous.public_key())} == set(verifier.keys)


def test_a_trusted_file_without_the_own_key_is_warned_about(tmp_path, caplog):
    other = Ed25519PrivateKey.generate()
    caplog.set_level(logging.WARNING)

    signer, verifier = load_keys(settings_with(public_pem(other), tmp_path))

    [warning] = [r.getMessage() for r in caplog.records]
    assert signer.key_id in warning
    assert str(tmp_path / "trusted.pem") in warning
    # Still runs, trusting both: by hand, the file may hold only previous keys.
    assert {signer.key_id, key_id(other.public_key())} == set(verifier.keys)


@pytest.mark.parametrize("text", [b"", b"not pem"])
def test_a_trusted_file_without_keys_is_refused(tmp_path, text):
    with pytest.raises(SettingsError, match="trusted keys"):
        load_keys(settings_with(text, tmp_path))
