"""The hook's small synchronous NATS client, against real nats-servers started here."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import nacl.signing
import nkeys
import pytest

from tests.support.certs import mtls_config, self_signed, server_certificate
from tests.support.natsproc import free_ports
from workflow.adapters.litenats import (
    Connection,
    NatsError,
    NatsPermissionError,
    NatsTimeout,
    NoResponders,
    _server,
    auth_options,
    connect,
    decode_headers,
    encode_headers,
)
from workflow.client.connection import connect as sdk_connect
from workflow.errors import ConfigError
from workflow.eventsig import decode_public
from workflow.nats_target import NatsTarget, Role, resolve_nats
from workflow.service.embedded import EmbeddedNats


@pytest.fixture
def server_with(tmp_path: Path) -> Iterator[object]:
    """Start nats-servers from config texts; all are stopped at the end."""
    started: list[EmbeddedNats] = []

    def start(config: str, name: str = "nats") -> EmbeddedNats:
        path = tmp_path / f"{name}.conf"
        path.write_text(config)
        server = EmbeddedNats(store_dir=tmp_path / name, config=path, monitor=False)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def seed_file(tmp_path: Path, name: str) -> tuple[Path, str]:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    path = tmp_path / f"{name}.nk"
    path.write_bytes(seed + b"\n")
    return path, nkeys.from_seed(bytearray(seed)).public_key.decode()


def responder(url: str, subject: str, ready: threading.Event, stop: threading.Event) -> None:
    """Answers every request on `subject` with its payload reversed and a header."""
    with connect(NatsTarget(url), name="responder", timeout=5) as conn:
        conn.subscribe(subject)
        conn.flush(5)
        ready.set()
        while not stop.is_set():
            msg = conn.next_msg(0.05)
            if msg is not None and msg.reply:
                conn.publish(msg.reply, msg.data[::-1], headers={"Answered-By": "responder"})


@pytest.fixture
def answering(nats_url: str) -> Iterator[str]:
    subject = f"lite.echo.{os.urandom(4).hex()}"
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=responder, args=(nats_url, subject, ready, stop))
    thread.start()
    assert ready.wait(10)
    yield subject
    stop.set()
    thread.join(10)


def test_messages_with_and_without_headers_and_payloads_larger_than_a_read(nats_url: str) -> None:
    with connect(NatsTarget(nats_url), name="t", timeout=5) as conn:
        sid = conn.subscribe("lite.plain")
        conn.flush(5)
        big = os.urandom(512 * 1024)
        conn.publish("lite.plain", b"hello")
        conn.publish("lite.plain", big, headers={"Nats-Msg-Id": "m-1", "X-Two": "a: b"})
        first = conn.next_msg(5)
        second = conn.next_msg(5)
        assert first is not None
        assert second is not None
        assert (first.subject, first.sid, first.data, first.headers) == (
            "lite.plain", sid, b"hello", None,
        )  # fmt: skip
        assert second.data == big
        assert second.headers == {"Nats-Msg-Id": "m-1", "X-Two": "a: b"}
        with pytest.raises(NatsError, match="larger than the server's limit"):
            conn.publish("lite.plain", big * 3)
        conn.unsubscribe(sid)
        conn.publish("lite.plain", b"gone")
        conn.flush(5)
        assert conn.next_msg(0.1) is None


def test_request_reply_through_the_private_inbox(nats_url: str, answering: str) -> None:
    target = NatsTarget(nats_url, inbox_prefix="_INBOX.someone")
    with connect(target, name="t", timeout=5) as conn:
        reply = conn.request(answering, b"abc", timeout=5)
        assert reply.data == b"cba"
        assert reply.subject.startswith("_INBOX.someone.")
        assert reply.headers == {"Answered-By": "responder"}
        again = conn.request(answering, b"xyz", timeout=5)
        assert again.data == b"zyx"


def test_no_responders_and_no_answer_are_told_apart_within_the_timeout(nats_url: str) -> None:
    with connect(NatsTarget(nats_url), name="t", timeout=5) as conn:
        with pytest.raises(NoResponders):
            conn.request("lite.nobody.listens", b"", timeout=5)
        silent = conn.subscribe("lite.silent")
        conn.flush(5)
        started = time.monotonic()
        with pytest.raises(NatsTimeout):
            conn.request("lite.silent", b"?", timeout=0.3)
        assert time.monotonic() - started < 1.0
        # The request itself reached the subscriber and is kept for `next_msg`.
        kept = conn.next_msg(1)
        assert kept is not None
        assert (kept.sid, kept.reply is not None) == (silent, True)


def test_nkey_and_password_users_and_refusals(server_with: object, tmp_path: Path) -> None:
    seed, public = seed_file(tmp_path, "agent")
    server = server_with(  # type: ignore[operator]
        "authorization {\n  users = [\n"
        f'    {{nkey: {public}, permissions: {{publish: {{allow: ["ok.>", "_INBOX.agent.>"]}}, '
        'subscribe: {allow: ["_INBOX.agent.>", "ok.>"]}}}\n'
        '    {user: bob, password: "bob-secret"}\n  ]\n}\n'
    )
    as_agent = NatsTarget(server.url, nkey=seed, inbox_prefix="_INBOX.agent")
    with connect(as_agent, name="agent", timeout=5) as conn:
        conn.subscribe("ok.fine")
        conn.subscribe("secret.things")
        conn.flush(5)
        assert conn.refused == ["secret.things"]
        conn.publish("ok.fine", b"1")
        msg = conn.next_msg(5)
        assert msg is not None
        assert msg.data == b"1"
        conn.publish("not.allowed", b"x")
        with pytest.raises(NatsPermissionError, match="Permissions Violation for Publish"):
            conn.flush(5)
    with connect(NatsTarget(server.url, user="bob", password="bob-secret"), name="b", timeout=5):
        pass
    with connect(NatsTarget(server.url.replace("://", "://bob:bob-secret@")), name="b", timeout=5):
        pass
    started = time.monotonic()
    with pytest.raises(NatsError, match="refused the credentials"):
        with connect(NatsTarget(server.url, user="bob", password="wrong"), name="b", timeout=5):
            pass
    assert time.monotonic() - started < 2  # refused credentials fail at once, not at the timeout
    other, _ = seed_file(tmp_path, "stranger")
    with pytest.raises(NatsError, match="refused the credentials"):
        with connect(NatsTarget(server.url, nkey=other), name="s", timeout=5):
            pass


def test_a_token_in_the_url(server_with: object) -> None:
    server = server_with('authorization { token: "t0ken" }', "token")  # type: ignore[operator]
    with connect(NatsTarget(server.url.replace("://", "://t0ken@")), name="t", timeout=5) as conn:
        conn.flush(5)
    with pytest.raises(NatsError, match="refused"):
        with connect(NatsTarget(server.url), name="t", timeout=5):
            pass


def test_a_creds_file_sends_its_jwt_and_signs_the_nonce_with_its_seed(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    public = nkeys.from_seed(bytearray(seed.encode())).public_key.decode()
    creds = tmp_path / "user.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\neyJhbGciOiJlZDI1NTE5In0.e30.c2ln\n"
        "------END NATS USER JWT------\n\n************************* IMPORTANT "
        "*************************\nNKEY Seed printed below can be used to sign and prove "
        "identity.\n\n-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n------END USER NKEY SEED------\n\n*****\n"
    )
    options = auth_options(NatsTarget("nats://h", creds=creds), None, None, "n0nce")
    assert options["jwt"] == "eyJhbGciOiJlZDI1NTE5In0.e30.c2ln"
    raw = base64.b64decode(options["sig"])
    raw_key = decode_public(public, "U", nkeys.PREFIX_BYTE_USER)
    assert raw_key is not None
    key = nacl.signing.VerifyKey(raw_key)
    key.verify(b"n0nce", raw)  # raises unless signed by the creds file's seed


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _jwt(claims: dict[str, object], signer: nkeys.KeyPair) -> str:
    """A NATS JWT (ed25519-nkey) with these claims, signed by `signer`."""
    claims = {**claims, "iat": int(time.time()), "jti": os.urandom(16).hex().upper()}
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(signer.sign(f'{head}.{body}'.encode()))}"


def _pair(prefix: int) -> tuple[str, str, nkeys.KeyPair]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    pair = nkeys.from_seed(bytearray(seed))
    return seed.decode(), pair.public_key.decode(), pair


def test_a_creds_file_with_a_user_jwt_on_an_operator_mode_server(
    server_with: object, tmp_path: Path
) -> None:
    _, operator_key, operator = _pair(nkeys.PREFIX_BYTE_OPERATOR)
    _, account_key, account = _pair(nkeys.PREFIX_BYTE_ACCOUNT)
    _, system_key, _ = _pair(nkeys.PREFIX_BYTE_ACCOUNT)  # JetStream needs a system account
    user_seed, user_key, _ = _pair(nkeys.PREFIX_BYTE_USER)
    unlimited = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                 "wildcards": True, "conn": -1, "leaf": -1}  # fmt: skip
    operator_jwt = _jwt({"iss": operator_key, "sub": operator_key, "name": "ops",
                         "nats": {"type": "operator", "version": 2}}, operator)  # fmt: skip
    account_jwt = _jwt({"iss": operator_key, "sub": account_key, "name": "headgate",
                        "nats": {"limits": unlimited, "type": "account", "version": 2}},
                       operator)  # fmt: skip
    system_jwt = _jwt({"iss": operator_key, "sub": system_key, "name": "SYS",
                       "nats": {"limits": unlimited, "type": "account", "version": 2}},
                      operator)  # fmt: skip
    user_jwt = _jwt({"iss": account_key, "sub": user_key, "name": "agent",
                     "nats": {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                              "type": "user", "version": 2}}, account)  # fmt: skip
    server = server_with(  # type: ignore[operator]
        f"operator: {operator_jwt}\nsystem_account: {system_key}\nresolver: MEMORY\n"
        f"resolver_preload: {{\n  {account_key}: {account_jwt}\n  {system_key}: {system_jwt}\n}}\n",
        "operator",
    )
    creds = tmp_path / "agent.creds"
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n"
    )
    with connect(NatsTarget(server.url, creds=creds), name="t", timeout=5) as conn:
        conn.subscribe("lite.jwt")
        conn.publish("lite.jwt", b"signed in")
        msg = conn.next_msg(5)
        assert msg is not None
        assert msg.data == b"signed in"
    stranger_seed, _, _ = _pair(nkeys.PREFIX_BYTE_USER)
    creds.write_text(creds.read_text().replace(user_seed, stranger_seed))
    with pytest.raises(NatsError, match="refused the credentials"):
        with connect(NatsTarget(server.url, creds=creds), name="t", timeout=5):
            pass


def test_the_servers_are_tried_in_order_within_the_timeout(nats_url: str) -> None:
    dead = free_ports(2)
    target = NatsTarget(f"nats://127.0.0.1:{dead[0]}, {nats_url}")
    with connect(target, name="t", timeout=5) as conn:
        conn.flush(5)
    nowhere = NatsTarget(f"nats://127.0.0.1:{dead[0]},nats://127.0.0.1:{dead[1]}")
    started = time.monotonic()
    with pytest.raises(NatsError, match=r"cannot reach NATS .* within 0.5s"):
        with connect(nowhere, name="t", timeout=0.5):
            pass
    assert time.monotonic() - started < 1.5


def test_a_server_that_never_speaks_is_given_up_within_the_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(NatsError, match="cannot reach NATS"):
            with connect(NatsTarget(f"nats://127.0.0.1:{port}"), name="t", timeout=0.5):
                pass
        assert time.monotonic() - started < 1.5
    finally:
        listener.close()


def test_a_silent_server_first_in_the_list_does_not_use_up_the_timeout(nats_url: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        silent = f"nats://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with connect(NatsTarget(f"{silent},{nats_url}"), name="t", timeout=5) as conn:
            conn.flush(5)
        assert time.monotonic() - started < 4
    finally:
        listener.close()


def test_the_connection_lost_midway_is_an_error_not_a_hang(fresh_nats: EmbeddedNats) -> None:
    with connect(NatsTarget(fresh_nats.url), name="t", timeout=5) as conn:
        conn.subscribe("lite.x")
        conn.flush(5)
        fresh_nats.stop()
        with pytest.raises(NatsError, match="closed the connection"):
            conn.next_msg(5)


def test_headers_round_trip_with_a_status() -> None:
    raw = encode_headers({"Nats-Msg-Id": "abc", "Headgate-Signature": "x=="})
    assert raw == b"NATS/1.0\r\nNats-Msg-Id: abc\r\nHeadgate-Signature: x==\r\n\r\n"
    assert decode_headers(raw) == ({"Nats-Msg-Id": "abc", "Headgate-Signature": "x=="}, None)
    assert decode_headers(b"NATS/1.0 503\r\n\r\n") == ({}, "503")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for 127.0.0.1 (and its key), made with openssl."""
    return server_certificate(tmp_path_factory.mktemp("tls"))


def test_tls_when_the_url_says_so_or_the_server_requires_it(
    server_with: object, certificate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_with(  # type: ignore[operator]
        f'tls {{\n  cert_file: "{certificate / "cert.pem"}"\n'
        f'  key_file: "{certificate / "key.pem"}"\n}}\n',
        "tls",
    )
    # Unknown to the system's trust store: refused, within the timeout.
    with pytest.raises(NatsError, match="cannot reach NATS"):
        with connect(NatsTarget(server.url.replace("nats://", "tls://")), name="t", timeout=1):
            pass
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate / "cert.pem"))
    for url in (server.url.replace("nats://", "tls://"), server.url):
        with connect(NatsTarget(url), name="t", timeout=5) as conn:
            assert conn.info.get("tls_required") is True
            conn.subscribe("lite.tls")
            conn.publish("lite.tls", b"private")
            msg = conn.next_msg(5)
            assert msg is not None
            assert msg.data == b"private"


def test_a_connection_is_plain_text_by_default(nats_url: str) -> None:
    with connect(NatsTarget(nats_url), name="t", timeout=5) as conn:
        assert isinstance(conn, Connection)
        assert not hasattr(conn.sock, "cipher")


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("nats://127.0.0.1:4333", ("127.0.0.1", 4333, False, None, None)),
        ("tls://nats.example.com", ("nats.example.com", 4222, True, None, None)),
        ("localhost:5000", ("localhost", 5000, False, None, None)),
        ("nats://bob:p%40ss%3Aword@h:1", ("h", 1, False, "bob", "p@ss:word")),
        ("nats://t0ken@h:2", ("h", 2, False, "t0ken", None)),
        ("nats://[::1]:4222", ("::1", 4222, False, None, None)),
    ],
)
def test_server_urls(url: str, parsed: tuple[object, ...]) -> None:
    assert _server(url) == parsed


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(NatsError, match="unsupported NATS URL scheme 'ws'"):
        _server("ws://h:1")


def test_the_servers_pings_are_answered_while_waiting(server_with: object) -> None:
    # Three unanswered pings close the connection: 750 ms of silence, which a loaded machine
    # does not impose on the client by itself (it did at 100 ms and two pings).
    server = server_with('ping_interval: "250ms"\nping_max: 3\n', "pings")  # type: ignore[operator]
    with connect(NatsTarget(server.url), name="t", timeout=5) as conn:
        conn.subscribe("lite.alive")
        assert conn.next_msg(2.5) is None  # ten pings meanwhile: unanswered, it would be closed
        conn.publish("lite.alive", b"still here")
        msg = conn.next_msg(5)
        assert msg is not None
        assert msg.data == b"still here"


@pytest.fixture(scope="module")
def client_certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed client certificate (its own CA, which the server is told to trust)."""
    return self_signed(tmp_path_factory.mktemp("tls-client"), "headgate-hook")


def test_client_certificates_and_tls_before_info_as_the_sdk_sets_them(
    server_with: object, certificate: Path, client_certificate: Path, nats_url: str
) -> None:
    """A server that wants a client certificate and TLS from the first byte
    (`handshake_first`): the light client connects with the settings `resolve_nats` reads from
    the environment — the same `NatsTarget` the SDK connects with — and not without them."""
    server = server_with(  # type: ignore[operator]
        mtls_config(certificate, client_certificate),
        "mtls",
    )
    env = {
        "HEADGATE_NATS_URL": server.url,
        "HEADGATE_NATS_TLS_CA": str(certificate / "cert.pem"),
        "HEADGATE_NATS_TLS_CERT": str(client_certificate / "cert.pem"),
        "HEADGATE_NATS_TLS_KEY": str(client_certificate / "key.pem"),
        "HEADGATE_NATS_TLS_HANDSHAKE_FIRST": "1",
    }
    target = resolve_nats(role=Role.AGENT, env=env, data_dir=Path("/nonexistent"))
    assert (target.tls_ca, target.tls_cert, target.tls_handshake_first) == (
        certificate / "cert.pem", client_certificate / "cert.pem", True,
    )  # fmt: skip
    with connect(target, name="t", timeout=5) as conn:
        assert conn.sock.cipher() is not None  # type: ignore[attr-defined]
        conn.subscribe("lite.mtls")
        conn.publish("lite.mtls", b"private")
        msg = conn.next_msg(5)
        assert msg is not None
        assert msg.data == b"private"

    # The SDK's connection, from the same target.
    async def sdk() -> bytes:
        nc = await sdk_connect(target, name="sdk", connect_timeout=10)
        try:
            sub = await nc.subscribe("lite.mtls")
            await nc.publish("lite.mtls", b"from the sdk")
            return (await sub.next_msg(5)).data
        finally:
            await nc.close()

    assert asyncio.run(sdk()) == b"from the sdk"

    without_certificate = replace(target, tls_cert=None, tls_key=None)
    later_tls = replace(target, tls_handshake_first=False)
    for refused in (without_certificate, later_tls):
        with pytest.raises(NatsError, match="cannot reach NATS"):
            with connect(refused, name="t", timeout=1):
                pass
    # Settings TLS needs but the server does not offer: no plain-text fallback.
    with pytest.raises(NatsError, match="cannot reach NATS"):
        with connect(replace(target, url=nats_url), name="t", timeout=1):
            pass


def test_unreadable_tls_files_are_one_sentence(tmp_path: Path, nats_url: str) -> None:
    target = NatsTarget(nats_url, tls_cert=tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="cannot use the TLS files"):
        with connect(target, name="t", timeout=1):
            pass
