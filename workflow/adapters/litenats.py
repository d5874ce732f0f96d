"""A minimal synchronous NATS client: what one hook process needs, over a plain socket.

A client starts `headgate hook` for every tool call, so the process must start and finish in
milliseconds; importing asyncio and nats-py alone costs more than the whole call. This speaks
the NATS client protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol)
directly, for one short-lived connection: INFO / CONNECT with every credential `resolve_nats`
finds (an nkey seed signing the server's nonce, a `.creds` file's JWT, user and password, a
token in the URL), TLS when the URL says `tls://`, the server requires it or TLS settings are
given (a client certificate, the CAs to trust, TLS before the server's INFO for a server with
`handshake_first`: the `NatsTarget`'s, as the SDK uses them), PING / PONG,
SUB / UNSUB, PUB / HPUB, MSG / HMSG with headers, request / reply on the client's private
inbox prefix, and the server's `-ERR`s: a refused publish raises `NatsPermissionError` at once
(the caller fails closed), a refused subscription is recorded (`refused`) for the caller to
choose another way. A lost connection raises `NatsConnectionLost`; the caller may open
another (`open_connection`) and subscribe again, as a hook waiting for an approval does.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow.nats_target import NatsTarget, refusal_hint

#: Seconds one server may take to connect before the next one is tried (nats-py's, as the SDK
#: sets it): a server that accepts but never answers does not use up the whole timeout.
ATTEMPT_TIMEOUT = 2.0
#: The largest control line accepted from the server (INFO lists cluster URLs).
MAX_CONTROL_LINE = 1024 * 1024
_CRLF = b"\r\n"


class NatsError(Exception):
    """The connection failed or the server refused something; the message is one sentence."""


class NatsConnectionLost(NatsError):
    """The connection failed or the server closed it: another may be opened (`open_connection`)."""


class NatsTimeout(NatsError, TimeoutError):
    """Nothing arrived in time."""


class NoResponders(NatsError):
    """Nobody subscribes to the subject a request was sent to."""


class NatsPermissionError(NatsError):
    """The server refused a publish (a `Permissions Violation`)."""


@dataclass(frozen=True, slots=True)
class Msg:
    subject: str
    sid: int
    reply: str | None
    data: bytes
    headers: dict[str, str] | None = None
    #: The status of a header-only message (`503` for no responders), else None.
    status: str | None = None


def encode_headers(headers: Mapping[str, str]) -> bytes:
    lines = ["NATS/1.0"] + [f"{key}: {value}" for key, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def decode_headers(raw: bytes) -> tuple[dict[str, str], str | None]:
    """The headers of an HMSG, and its status code (None when it has none)."""
    lines = raw.decode(errors="replace").split("\r\n")
    first = lines[0].split(None, 2)
    if not first or first[0] != "NATS/1.0":
        raise NatsError("the server sent a message with malformed headers")
    status = first[1] if len(first) > 1 else None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep and key.strip():
            headers.setdefault(key.strip(), value.strip())
    return headers, status


def _seed_in(text: str, begin: str | None = None) -> str:
    """The nkey seed in a seed file, or the block after `begin` in a creds file."""
    lines = [line.strip() for line in text.splitlines()]
    if begin is not None:
        for index, line in enumerate(lines):
            if begin in line:
                found = next((s for s in lines[index + 1 :] if s and not s.startswith("-")), "")
                if found:
                    return found
        raise NatsError(f"no {begin.removeprefix('BEGIN ').lower()} in the credentials file")
    for line in lines:
        if line.startswith("S") and len(line) > 50:
            return line
    raise NatsError("no nkey seed in the seed file")


def _sign(seed: str, nonce: str) -> tuple[str, str]:
    """(public key, signature of the server's nonce) as nats-py sends them."""
    import nkeys

    pair = nkeys.from_seed(bytearray(seed.encode()))
    try:
        return pair.public_key.decode(), base64.b64encode(pair.sign(nonce.encode())).decode()
    finally:
        pair.wipe()


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise NatsError(f"cannot read the {what} {path}: {exc.strerror}") from exc


def auth_options(
    target: NatsTarget, url_user: str | None, url_password: str | None, nonce: str | None
) -> dict[str, Any]:
    """The CONNECT fields that authenticate `target` (the URL's user info counts too)."""
    options: dict[str, Any] = {}
    user = target.user if target.user is not None else url_user
    password = target.password if target.password is not None else url_password
    if user is not None and password is not None:
        options["user"], options["pass"] = user, password
    elif user is not None:
        options["auth_token"] = user  # nats://token@host
    if target.creds is not None:
        text = _read(target.creds, "credentials file")
        options["jwt"] = _seed_in(text, "BEGIN NATS USER JWT")
        if nonce is not None:
            _, options["sig"] = _sign(_seed_in(text, "BEGIN USER NKEY SEED"), nonce)
    elif target.nkey is not None:
        seed = _seed_in(_read(target.nkey, "nkey seed file"))
        public, signature = _sign(seed, nonce or "")
        options["nkey"] = public
        if nonce is not None:
            options["sig"] = signature
    return options


class Connection:
    """One connection to one server; use `connect`."""

    def __init__(self, sock: socket.socket, info: dict[str, Any], inbox_prefix: str):
        self.sock = sock
        self.info = info
        self._buf = bytearray()
        self._sid = 0
        self._pending: deque[Msg] = deque()
        #: Subscriptions the server refused (their subjects), from its `-ERR`s.
        self.refused: list[str] = []
        self._pongs = 0
        self._token = 0
        self._inbox_prefix = inbox_prefix
        self._inbox = self.new_subject()
        self._inbox_sid: int | None = None

    # ------------------------------------------------------------------ writing
    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise NatsConnectionLost(f"the connection to NATS failed: {exc}") from exc

    def subscribe(self, subject: str) -> int:
        self._sid += 1
        self._send(f"SUB {subject} {self._sid}\r\n".encode())
        return self._sid

    def unsubscribe(self, sid: int) -> None:
        self._send(f"UNSUB {sid}\r\n".encode())

    def publish(
        self, subject: str, data: bytes, *, reply: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        to = f"{subject} {reply}" if reply else subject
        head = encode_headers(headers) if headers else b""
        limit = self.info.get("max_payload")
        if isinstance(limit, int) and len(head) + len(data) > limit:
            raise NatsError(
                f"the message on {subject} ({len(head) + len(data)} bytes) is larger than the "
                f"server's limit of {limit} bytes"
            )
        if headers:
            line = f"HPUB {to} {len(head)} {len(head) + len(data)}\r\n".encode()
            self._send(line + head + data + _CRLF)
        else:
            self._send(f"PUB {to} {len(data)}\r\n".encode() + data + _CRLF)

    # ------------------------------------------------------------------ reading
    def _fill(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NatsTimeout("no answer from NATS in time")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError as exc:
            raise NatsTimeout("no answer from NATS in time") from exc
        except OSError as exc:
            raise NatsConnectionLost(f"the connection to NATS failed: {exc}") from exc
        if not chunk:
            raise NatsConnectionLost("NATS closed the connection")
        self._buf += chunk

    def _line(self, deadline: float) -> bytes:
        while (end := self._buf.find(_CRLF)) < 0:
            if len(self._buf) > MAX_CONTROL_LINE:
                raise NatsError("the server sent a control line that is too long")
            self._fill(deadline)
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def _payload(self, size: int, deadline: float) -> bytes:
        while len(self._buf) < size + 2:
            self._fill(deadline)
        data = bytes(self._buf[:size])
        del self._buf[: size + 2]
        return data

    def _op(self, deadline: float) -> Msg | None:
        """Read one protocol operation; a message is returned, everything else handled."""
        line = self._line(deadline)
        op, _, rest = line.partition(b" ")
        op = op.upper()
        if op == b"MSG":
            args = rest.decode().split()
            size = int(args[-1])
            reply = args[2] if len(args) == 4 else None
            return Msg(args[0], int(args[1]), reply, self._payload(size, deadline))
        if op == b"HMSG":
            args = rest.decode().split()
            head_size, size = int(args[-2]), int(args[-1])
            reply = args[2] if len(args) == 5 else None
            body = self._payload(size, deadline)
            headers, status = decode_headers(body[:head_size])
            return Msg(args[0], int(args[1]), reply, body[head_size:], headers, status)
        if op == b"PING":
            self._send(b"PONG\r\n")
        elif op == b"PONG":
            self._pongs += 1
        elif op == b"-ERR":
            self._error(rest.decode(errors="replace").strip().strip("'"))
        elif op not in (b"+OK", b"INFO"):
            raise NatsError(f"the server sent an unknown operation {op.decode(errors='replace')!r}")
        return None

    def _error(self, text: str) -> None:
        lowered = text.lower()
        if lowered.startswith("permissions violation for subscription to"):
            self.refused.append(text.split(" to ", 1)[1].strip().strip('"'))
            return
        if "permissions violation" in lowered:
            raise NatsPermissionError(f"NATS refused this client: {text}")
        raise NatsError(f"NATS: {text}")

    def flush(self, timeout: float) -> None:
        """PING and wait for the PONG: everything sent before has been processed (refused
        subscriptions are in `refused` by then)."""
        deadline = time.monotonic() + timeout
        expected = self._pongs + 1
        self._send(b"PING\r\n")
        while self._pongs < expected:
            msg = self._op(deadline)
            if msg is not None:
                self._keep(msg)

    def _keep(self, msg: Msg) -> None:
        if msg.sid != self._inbox_sid:  # a late reply to an abandoned request is dropped
            self._pending.append(msg)

    def next_msg(self, timeout: float) -> Msg | None:
        """The next message of a subscription (not a reply), or None after `timeout` seconds."""
        if self._pending:
            return self._pending.popleft()
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                msg = self._op(deadline)
            except NatsTimeout:
                return None
            if msg is not None and msg.sid != self._inbox_sid:
                return msg

    def new_subject(self) -> str:
        """A fresh subject under the private inbox prefix (for a delivery subscription)."""
        return f"{self._inbox_prefix}.{os.urandom(11).hex()}"

    def new_inbox(self) -> str:
        """A reply subject of this client's private inbox (one subscription serves them all)."""
        if self._inbox_sid is None:
            self._inbox_sid = self.subscribe(f"{self._inbox}.*")
        self._token += 1
        return f"{self._inbox}.{self._token}"

    def request(
        self, subject: str, data: bytes, *, timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> Msg:  # fmt: skip
        """Publish with a reply subject and wait for the reply; messages of other
        subscriptions arriving meanwhile are kept for `next_msg`."""
        reply = self.new_inbox()
        self.publish(subject, data, reply=reply, headers=headers)
        deadline = time.monotonic() + timeout
        while True:
            msg = self._op(deadline)
            if msg is None:
                continue
            if msg.sid != self._inbox_sid:
                self._pending.append(msg)
            elif msg.subject == reply:
                if msg.status == "503":
                    raise NoResponders(f"no responders on {subject}")
                return msg

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------- connecting


def _server(url: str) -> tuple[str, int, bool, str | None, str | None]:
    """(host, port, tls, user, password) of one server URL: `[nats|tls://][user[:pass]@]host
    [:port]` (urllib.parse costs more to import than this takes to write)."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "nats", url.strip()
    if scheme not in ("nats", "tls"):
        raise NatsError(f"unsupported NATS URL scheme {scheme!r} in {url}")
    rest = rest.split("/", 1)[0]
    userinfo, at, hostport = rest.rpartition("@")
    user = password = None
    if at:
        name, colon, secret = userinfo.partition(":")
        user, password = _unquote(name), (_unquote(secret) if colon else None)
    if hostport.startswith("["):  # [IPv6]:port
        host, _, tail = hostport[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = hostport.partition(":")
    try:
        port = int(port_text) if port_text else 4222
    except ValueError as exc:
        raise NatsError(f"the port in the NATS URL {url} is not a number") from exc
    return host or "127.0.0.1", port, scheme == "tls", user, password


def _unquote(text: str) -> str:
    """Percent-decoding of a URL's user info (`%40` → `@`)."""
    if "%" not in text:
        return text
    raw = bytearray()
    index = 0
    while index < len(text):
        if text[index] == "%" and _is_hex(text[index + 1 : index + 3]):
            raw.append(int(text[index + 1 : index + 3], 16))
            index += 3
        else:
            raw += text[index].encode()
            index += 1
    return raw.decode(errors="replace")


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)


def _open(target: NatsTarget, url: str, name: str, deadline: float) -> Connection:
    host, port, want_tls, url_user, url_password = _server(url)
    left = deadline - time.monotonic()
    sock = socket.create_connection((host, port), timeout=max(left, 0.001))
    conn: Connection | None = None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(sock, {}, target.inbox_prefix or "_INBOX")
        if target.tls_handshake_first:  # the server speaks TLS from the first byte
            conn.sock = _wrap(sock, target, host, deadline)
        line = conn._line(deadline)
        op, _, rest = line.partition(b" ")
        if op.upper() != b"INFO":
            raise NatsError(f"{url} is not a NATS server")
        info: dict[str, Any] = json.loads(rest)
        tls = want_tls or target.tls_configured or bool(info.get("tls_required"))
        if tls and not target.tls_handshake_first:
            conn.sock = _wrap(sock, target, host, deadline)
        conn.info = info
        options: dict[str, Any] = {
            "verbose": False, "pedantic": False, "tls_required": tls, "name": name,
            "lang": "python3", "version": "headgate-hook", "protocol": 1, "headers": True,
            "no_responders": True,
            **auth_options(target, url_user, url_password, info.get("nonce")),
        }  # fmt: skip
        conn._send(b"CONNECT " + json.dumps(options).encode() + b"\r\nPING\r\n")
        conn._pongs = 0
        while conn._pongs < 1:
            msg = conn._op(deadline)
            if msg is not None:
                raise NatsError("the server sent a message before the connection was made")
        return conn
    except BaseException:
        if conn is not None and conn.sock is not sock:
            conn.sock.close()  # the TLS socket holds the connection once it wraps it
        sock.close()
        raise


def _wrap(sock: socket.socket, target: NatsTarget, host: str, deadline: float) -> socket.socket:
    """TLS over `sock` with `target`'s settings (its CAs, its client certificate), else the
    system's trust store; the handshake within the deadline."""
    sock.settimeout(max(deadline - time.monotonic(), 0.001))
    return target.ssl_context().wrap_socket(sock, server_hostname=host)  # type: ignore[no-any-return]


def _refused(exc: Exception) -> bool:
    text = str(exc).lower()
    return "authorization violation" in text or (
        "authentication" in text and ("expired" in text or "revoked" in text)
    )


@contextmanager
def connect(target: NatsTarget, *, name: str, timeout: float) -> Iterator[Connection]:
    """`open_connection`, closed on exit."""
    conn = open_connection(target, name=name, timeout=timeout)
    try:
        yield conn
    finally:
        conn.close()


def open_connection(target: NatsTarget, *, name: str, timeout: float) -> Connection:
    """Connect to the first server of `target` that answers, trying them in order (each for
    at most `ATTEMPT_TIMEOUT` seconds) until `timeout` seconds have passed; refused credentials
    fail at once. The caller closes it."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    servers = target.servers or ["nats://127.0.0.1:4222"]
    conn: Connection | None = None
    pause = 0.05
    while conn is None:
        for url in servers:
            try:
                attempt = min(deadline, time.monotonic() + ATTEMPT_TIMEOUT)
                conn = _open(target, url, name, attempt)
                break
            except NatsError as exc:
                if _refused(exc):
                    how = f" ({target.origin})" if target.origin != "arguments" else ""
                    raise NatsError(
                        f"NATS at {target.url} refused the credentials{how}: authorization "
                        "violation. Check the user, password, nkey or creds file."
                        + refusal_hint(target)
                    ) from exc
                last = exc
            except (OSError, ValueError) as exc:  # refused, unreachable, a TLS failure
                last = exc
            if time.monotonic() >= deadline:
                break
        if conn is None:
            if time.monotonic() + pause >= deadline:
                reason = (
                    f" (last error: {str(last).strip() or type(last).__name__})" if last else ""
                )
                raise NatsError(f"cannot reach NATS at {target.url} within {timeout:g}s{reason}")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
    return conn
