"""Throwaway mutual-TLS material for the extender benchmark (I/O: writes PEM files).

Production serves the extender over HTTPS with client certificates (`extender_tls`), so
the benchmark times that transport: a self-signed CA, a server certificate for
127.0.0.1 and kube-scheduler's client certificate, all signed by it, written to a
folder. Made with the `cryptography` package where it is installed, else with the
`openssl` command (one of the two is on any machine that runs the operator's tests).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """The CA both sides trust, the server's pair and the client's pair (PEM paths)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(folder: Path) -> Pki:
    """A CA, a server certificate (IP 127.0.0.1) and a client certificate under `folder`."""
    pki = Pki(*(folder / name for name in ("ca.crt", "server.crt", "server.key",
                                           "client.crt", "client.key")))  # fmt: skip
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _with_openssl(folder, pki)
    else:
        _with_cryptography(pki)
    return pki


def _with_cryptography(pki: Pki) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    Issued = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]  # noqa: N806

    def issue(name: str, signer: Issued | None, **kind: bool) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(signer[0].subject if signer else subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=kind.get("ca", False), path_length=None),
                           critical=True)
        )  # fmt: skip
        if kind.get("server"):
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        if kind.get("client"):
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        return builder.sign(signer[1] if signer else key, hashes.SHA256()), key

    def write(cert_path: Path, key_path: Path | None, issued: Issued) -> None:
        cert_path.write_bytes(issued[0].public_bytes(serialization.Encoding.PEM))
        if key_path is not None:
            key_path.write_bytes(
                issued[1].private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )

    ca = issue("numatopo-bench-ca", None, ca=True)
    write(pki.ca, None, ca)
    write(pki.server_cert, pki.server_key, issue("numatopo-operator", ca, server=True))
    write(pki.client_cert, pki.client_key, issue("kube-scheduler", ca, client=True))


def _with_openssl(folder: Path, pki: Pki) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("mutual TLS needs the cryptography package or the openssl command")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=folder)

    ca_key = folder / "ca.key"
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(pki.ca),
        "-days", "1", "-subj", "/CN=numatopo-bench-ca")  # fmt: skip
    for cert, key, name, extension in (
        (pki.server_cert, pki.server_key, "numatopo-operator",
         "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        (pki.client_cert, pki.client_key, "kube-scheduler", "extendedKeyUsage=clientAuth\n"),
    ):  # fmt: skip
        request, extra = folder / f"{name}.csr", folder / f"{name}.ext"
        extra.write_text(extension)
        run("req", "-new", *ec, "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}")
        run("x509", "-req", "-in", str(request), "-CA", str(pki.ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-days", "1", "-extfile", str(extra), "-out", str(cert))  # fmt: skip
