"""`headgate serve` against an external nats-server that wants TLS from the first byte and a
client certificate (`--nats-tls-*`): the connections the service makes — its stages', the
FastStream API's, its intake worker processes' — speak TLS with those settings; without them
the service does not start, and a bad TLS setting is a clear error, not a traceback."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.service.helpers import Observer, propose, unique_prefix, wait_until
from tests.support.certs import mtls_config, self_signed, server_certificate
from tests.support.executable import headgate_executable
from workflow.errors import ConfigError, ConnectError
from workflow.messages import ServiceKeyReply
from workflow.service.embedded import EmbeddedNats
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.service.streams import service_consumers
from workflow.subjects import Subjects


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The server's certificate, and a client's (its own CA, which the server trusts)."""
    return (
        server_certificate(tmp_path_factory.mktemp("server")),
        self_signed(tmp_path_factory.mktemp("client"), "headgate-serve"),
    )


@pytest.fixture
def mtls_nats(tmp_path: Path, certificates: tuple[Path, Path]) -> Iterator[str]:
    """A JetStream nats-server that verifies client certificates, TLS before its INFO."""
    config = tmp_path / "mtls.conf"
    config.write_text(mtls_config(*certificates))
    server = EmbeddedNats(store_dir=tmp_path / "nats", config=config, monitor=False)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _tls_settings(certificates: tuple[Path, Path]) -> dict[str, object]:
    server, client = certificates
    return {
        "nats_tls_ca": server / "cert.pem",
        "nats_tls_cert": client / "cert.pem",
        "nats_tls_key": client / "key.pem",
        "nats_tls_first": True,
    }


async def test_the_service_runs_on_a_server_that_wants_tls_first_and_a_client_certificate(
    mtls_nats: str, tmp_path: Path, certificates: tuple[Path, Path]
) -> None:
    prefix = unique_prefix()
    subjects = Subjects(prefix)
    service = Service(
        Settings(
            data_dir=tmp_path / "data", nats_url=mtls_nats, prefix=prefix, intake_processes=2,
            **_tls_settings(certificates),  # type: ignore[arg-type]
        )
    )  # fmt: skip
    await service.start()
    server, client = certificates
    context = ssl.create_default_context(cafile=str(server / "cert.pem"))
    context.load_cert_chain(str(client / "cert.pem"), str(client / "key.pem"))
    nc = await nats.connect(mtls_nats, tls=context, tls_handshake_first=True)
    try:
        observer = Observer(nc, subjects)
        await observer.start()
        # The stages' connection: a read is released.
        pid = await propose(nc, subjects, agent="agent-1", tool="read_file")
        (released,) = await observer.wait_for("released", pid)
        assert released["proposal_id"] == pid
        # The FastStream API's connection: it answers.
        reply = await nc.request(subjects.api("key"), b"{}", timeout=10)
        assert ServiceKeyReply.model_validate_json(reply.data).public_key.startswith("N")
        assert service.broker is not None
        assert service.broker.connection is not None  # the API's own connection
        assert service.broker.connection.is_connected
        # The intake worker process, started with the same settings, pulls too.
        intake = service_consumers(subjects)["intake"]
        js = nc.jetstream()

        async def pulling() -> int:
            info = await js.consumer_info(intake.stream, intake.durable)
            return info.num_waiting or 0

        assert await wait_until(pulling, lambda n: n >= 2, timeout=60) >= 2
    finally:
        await nc.close()
        await service.stop()


async def test_without_the_tls_settings_the_service_does_not_start(
    mtls_nats: str, tmp_path: Path
) -> None:
    service = Service(Settings(data_dir=tmp_path / "data", nats_url=mtls_nats, connect_timeout=1.0))
    with pytest.raises(ConnectError, match="cannot reach NATS"):
        await service.start()


def test_tls_settings_that_cannot_be_used_are_clear_errors(
    tmp_path: Path, certificates: tuple[Path, Path]
) -> None:
    server, _ = certificates
    with pytest.raises(ConfigError, match="cannot use the TLS files"):
        Settings(data_dir=tmp_path, nats_url="nats://127.0.0.1:1",
                 nats_tls_cert=tmp_path / "missing.pem").nats_ssl_context()  # fmt: skip
    with pytest.raises(ConfigError, match="needs --nats-tls-cert"):
        Settings(data_dir=tmp_path, nats_url="nats://127.0.0.1:1",
                 nats_tls_key=server / "key.pem", nats_tls_ca=server / "cert.pem",
                 ).nats_ssl_context()  # fmt: skip
    with pytest.raises(ConfigError, match="external NATS server"):
        Settings(data_dir=tmp_path, nats_tls_ca=server / "cert.pem").nats_ssl_context()
    # From the command line: the message, and no traceback.
    done = subprocess.run(
        [headgate_executable(), "serve", "--data-dir", str(tmp_path / "cli"),
         "--nats-url", "nats://127.0.0.1:1", "--nats-tls-cert", str(tmp_path / "missing.pem")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "cannot use the TLS files" in done.stderr
    assert "Traceback" not in done.stderr
