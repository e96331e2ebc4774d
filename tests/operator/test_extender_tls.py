"""The extender over real mutual TLS: only kube-scheduler's certificate gets an answer.

A CA, the operator's server certificate and the scheduler's client certificate are made
here (the `cryptography` package), as the chart makes them; the real operator serves
them against the emulator, and real TLS clients call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import signing_keys

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

from numatopo_operator import extender_tls, main  # noqa: E402
from numatopo_operator.settings import OperatorSettings  # noqa: E402

NODE = "h100-a"
HOSTNAME = "numatopo-operator.numatopo-system.svc"


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def write(self, folder: Path, stem: str) -> tuple[Path, Path]:
        """`stem.crt` and `stem.key`, each replaced in one rename (as a Secret volume
        swaps its files), so the operator never sees half a file."""
        folder.mkdir(parents=True, exist_ok=True)
        pem = self.cert.public_bytes(serialization.Encoding.PEM)
        key = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        paths = []
        for suffix, data in ((".crt", pem), (".key", key)):
            path = folder / f"{stem}{suffix}"
            scratch = folder / f".{stem}{suffix}.new"
            scratch.write_bytes(data)
            os.replace(scratch, path)
            paths.append(path)
        return paths[0], paths[1]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def issue(
    name: str,
    *,
    by: Issued | None = None,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
    dns: tuple[str, ...] = (),
) -> Issued:
    """A certificate for `name`, signed by `by` (self-signed when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(by.cert.subject if by else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if dns:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    signer = by.key if by else key
    return Issued(builder.sign(signer, hashes.SHA256()), key)


@dataclass
class Pki:
    """What the chart makes: one CA, the operator's server and the scheduler's client
    certificate, written as the operator's Secret volume holds them."""

    folder: Path
    ca: Issued
    server: Issued
    client: Issued

    @property
    def ca_file(self) -> Path:
        return self.folder / "ca.crt"

    def write_ca(self, ca: Issued) -> None:
        scratch = self.folder / ".ca.crt.new"
        scratch.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
        os.replace(scratch, self.ca_file)

    def settings(self) -> dict[str, str]:
        return {
            "extender_tls_cert": str(self.folder / "tls.crt"),
            "extender_tls_key": str(self.folder / "tls.key"),
            "extender_client_ca": str(self.ca_file),
        }

    def client_context(self, client: Issued | None, folder: Path) -> ssl.SSLContext:
        """A TLS client that trusts the CA (as kube-scheduler's tlsConfig.caFile) and shows
        `client` (None: no client certificate at all)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client is not None:
            cert, key = client.write(folder, f"client-{client.cert.serial_number}")
            context.load_cert_chain(str(cert), str(key))
        return context


def server_cert(ca: Issued) -> Issued:
    return issue("numatopo-operator", by=ca, usage=ExtendedKeyUsageOID.SERVER_AUTH, dns=(HOSTNAME,))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = issue("numatopo-ca", ca=True)
    made = Pki(
        tmp_path / "operator",
        ca,
        server_cert(ca),
        issue("numatopo-scheduler", by=ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    )
    made.server.write(made.folder, "tls")
    made.write_ca(ca)
    return made


@pytest.fixture
async def operator(env, pki):
    cluster, start_operator, h100, _, topology_object, wait = env.parts()
    await cluster.create_numatopology(topology_object(NODE, h100))
    running = await start_operator(**pki.settings())
    await wait(running.runtime.indexed.is_set, what="operator listed everything")
    return running


def filter_args(pod) -> dict:
    return {"Pod": pod("job", node=None, gpus=2), "Nodes": None, "NodeNames": [NODE]}


def _post_filter(
    port: int, context: ssl.SSLContext, body: dict, host: str
) -> tuple[int, dict, bytes]:
    payload = json.dumps(body).encode()
    with (
        socket.create_connection(("127.0.0.1", port), timeout=20) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        seen = tls.getpeercert(binary_form=True)
        assert seen is not None
        tls.sendall(
            f"POST /filter HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    if not answer:
        raise ConnectionError("the server closed the connection without an answer")
    head, _, text = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(text), seen


async def call_filter(
    operator, context: ssl.SSLContext, body: dict, *, host: str = HOSTNAME
) -> tuple[int, dict, bytes]:
    """POST /filter over TLS as kube-scheduler does: (status, JSON answer, the server
    certificate seen). `host` is the name the client checks and sends as SNI (none for
    an IP address); the socket dials 127.0.0.1. A blocking socket (in a thread), so that
    the server's TLS alert surfaces as the `ssl.SSLError` it is."""
    return await asyncio.to_thread(
        _post_filter, operator.servers.extender_port, context, body, host
    )


def der(issued: Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.DER)


async def test_the_schedulers_certificate_gets_a_filter_answer(operator, pki, pod, tmp_path):
    status, result, seen = await call_filter(
        operator, pki.client_context(pki.client, tmp_path), filter_args(pod)
    )

    assert (200, [NODE], "", der(pki.server)) == (
        status,
        result["NodeNames"],
        result["Error"],
        seen,
    )


async def refused(operator, context: ssl.SSLContext, pod) -> bool:
    """Whether the server gave this client no HTTP answer: the handshake failed on the
    client's side (TLS 1.2, or a bad server certificate) or, TLS 1.3, the server ended
    the connection once it had checked the client's certificate (asyncio's server
    closes without flushing its alert, so the client reads an end of stream)."""
    try:
        await call_filter(operator, context, filter_args(pod))
    except (ssl.SSLError, ConnectionError):
        return True
    return False


async def test_no_client_certificate_is_refused(operator, pki, pod, tmp_path):
    assert await refused(operator, pki.client_context(None, tmp_path), pod)


async def test_the_listening_context_demands_tls_1_2_and_a_client_certificate(operator):
    context = operator.servers.extender_tls.listening

    assert (ssl.TLSVersion.TLSv1_2, ssl.CERT_REQUIRED) == (
        context.minimum_version,
        context.verify_mode,
    )


async def test_a_client_certificate_from_another_ca_is_refused(operator, pki, pod, tmp_path):
    """Signed by a CA of its own with the same name as ours: the name is not the key."""
    rogue_ca = issue("numatopo-ca", ca=True)
    rogue = issue("numatopo-scheduler", by=rogue_ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)

    assert await refused(operator, pki.client_context(rogue, tmp_path), pod)


async def test_plain_http_gets_no_answer(operator, pod):
    """A plain HTTP request to the extender port: the TLS server finds no handshake and
    closes; no HTTP answer (and so no decision) ever comes back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", operator.servers.extender_port)
    writer.write(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    await writer.drain()
    async with asyncio.timeout(10):
        answer = await reader.read()
    writer.close()

    assert not answer.startswith(b"HTTP/"), answer


@pytest.mark.parametrize("host", [HOSTNAME, "127.0.0.1"], ids=["sni", "no-sni"])
async def test_rotated_files_are_served_without_a_restart(operator, pki, pod, tmp_path, host):
    """The server certificate and the client CA are replaced on disk as a Secret update
    replaces them: the next connection sees the new server certificate, the scheduler's
    certificate from the new CA is accepted and the one from the old CA refused.
    Without SNI too (a client dialling an IP sends none)."""
    new_ca = issue("numatopo-ca-2", ca=True)
    new_server = server_cert(new_ca)
    new_client = issue("numatopo-scheduler", by=new_ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    before = operator.servers.extender_tls.reloads

    new_server.write(pki.folder, "tls")
    pki.write_ca(new_ca)
    status, result, seen = await call_filter(
        operator, pki.client_context(new_client, tmp_path), filter_args(pod), host=host
    )
    old_client_refused = await refused(operator, pki.client_context(pki.client, tmp_path), pod)

    assert (200, [NODE], der(new_server), before + 1, True) == (
        status,
        result["NodeNames"],
        seen,
        operator.servers.extender_tls.reloads,
        old_client_refused,
    )


async def test_half_rotated_files_keep_the_previous_certificate(operator, pki, pod, tmp_path):
    """A certificate without its key (one file swapped before the other): the server keeps
    serving the previous pair instead of failing every handshake."""
    other = server_cert(pki.ca)
    cert, _ = other.write(tmp_path / "other", "tls")
    os.replace(cert, pki.folder / "tls.crt")

    status, _, seen = await call_filter(
        operator, pki.client_context(pki.client, tmp_path), filter_args(pod)
    )

    assert (200, der(pki.server)) == (status, seen)


def _keep_alive_filter(tls: ssl.SSLSocket, body: dict) -> int:
    """POST /filter on an open connection, kept open: the answer's status."""
    payload = json.dumps(body).encode()
    tls.sendall(
        f"POST /filter HTTP/1.1\r\nHost: {HOSTNAME}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = tls.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        answer += chunk
    head, _, text = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )  # fmt: skip
    while len(text) < length:
        text += tls.recv(65536)
    return int(head.split()[1])


async def test_a_flood_of_silent_connections_is_shut_and_the_scheduler_kept(
    operator, pki, pod, tmp_path
):
    """The scheduler holds a connection it made a request on; then 300 more connections
    than the port's limit open and send nothing (each TLS handshake waiting holds about
    300 KiB for 60 s: 1,500 took 455 MiB, an operator's whole memory limit). The oldest
    silent ones are ended at once, the scheduler's connection still answers, and so does
    a new one."""
    limit, extra = main.EXTENDER_CONNECTIONS, 300
    context = pki.client_context(pki.client, tmp_path)
    port = operator.servers.extender_port
    raw = socket.create_connection(("127.0.0.1", port), timeout=20)
    kept = context.wrap_socket(raw, server_hostname=HOSTNAME)
    silent: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        assert await asyncio.to_thread(_keep_alive_filter, kept, filter_args(pod)) == 200
        for _ in range(limit + extra):
            silent.append(await asyncio.open_connection("127.0.0.1", port))
        async with asyncio.timeout(10):  # the handshake deadline is 60 s
            for reader, _ in silent[:extra]:
                with contextlib.suppress(ConnectionResetError):
                    assert await reader.read() == b""
        assert await asyncio.to_thread(_keep_alive_filter, kept, filter_args(pod)) == 200
        status, _, _ = await call_filter(operator, context, filter_args(pod))
        assert status == 200
        shut = operator.runtime.metrics.registry.get_sample_value(
            "numatopo_http_connections_shut_total", {"server": "extender"}
        )
        # The scheduler's connection takes one of the places; the new call's shut one more.
        assert shut == extra + 2, shut
    finally:
        kept.close()
        for _, writer in silent:
            writer.close()


def test_without_tls_files_the_extender_does_not_start() -> None:
    with pytest.raises(extender_tls.ExtenderTlsError, match="--extender-insecure-plain-http"):
        extender_tls.extender_context(OperatorSettings())


def test_the_operator_process_refuses_to_start_without_tls(tmp_path: Path) -> None:
    """`numatopo operator` with neither TLS files nor the insecure switch: exit 2 with the
    reason, before any port or API connection."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NUMATOPO_")}
    environ.update(
        {
            "NUMATOPO_EXTENDER_PORT": "0",
            "NUMATOPO_METRICS_PORT": "0",
            # A signing key, so that the missing TLS is what stops it.
            "NUMATOPO_SIGNING_KEY_FILE": signing_keys.KEY_FILE,
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "numatopo_cli.main", "operator"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )

    assert 2 == done.returncode, done.stderr
    assert "the scheduler extender needs TLS" in done.stderr
