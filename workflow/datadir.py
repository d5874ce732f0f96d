"""The data dir (`.headgate/` by default): what `serve` keeps there and the CLI reads back.

| file | written by | read by |
|---|---|---|
| `nats.url` | `serve` with an embedded nats-server | the CLI, agents (`--nats-url` default) |
| `serve.lock` | `serve` (one per data dir; holds its pid) | a second `serve` |
| `approver.seed` | `serve` without a policy file (mode 0600) | `headgate approve` / `reject` |
| `headgate.db` | `serve` (SQLite, unless `--database-url`) | `headgate audit` |
| `nats.port` | `serve` with an embedded nats-server (kept after it stops) | the next `serve` |
| `nats/` | the embedded nats-server's JetStream store and account config | |
| `credentials/<role>.nk` | `serve` with an embedded server (mode 0600) | clients of that role |
| `credentials/agents/` | `headgate agents add` (seed and hook token per agent, 0600) | that agent |
| `web.url` | `serve --web-port` | `headgate web invite` (the link's base) |
| `notify.key` | `serve`, for webhooks without a secret of their own (0600) | webhook receivers |
| `hook.token` | `serve --hook-listen` (0600): the HTTP hooks' bearer token | the agents' settings |
| `hook.url` | `serve --hook-listen`: the HTTP hooks' address | `hook --print-config --http` |
| `service.seed` | `serve` without `--service-seed` (0600): signs events, answers | `serve` |
| `service.pub` | `serve` (the service key's public key) | the CLI, the SDKs, the web inbox |

Where a client looks is `workflow.client.connection.resolve_nats`; the names it reads are
defined there (a client loads little) and re-exported here.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

from workflow.client.connection import CREDENTIALS_DIR as CREDENTIALS_DIR
from workflow.client.connection import DEFAULT_DATA_DIR
from workflow.client.connection import SERVICE_KEY_FILE as SERVICE_KEY_FILE
from workflow.client.connection import URL_FILE as URL_FILE
from workflow.client.connection import credentials_file as credentials_file
from workflow.errors import ConfigError

if TYPE_CHECKING:
    from workflow.signing import ApproverKey, ServiceKey

DEFAULT = DEFAULT_DATA_DIR
#: The embedded nats-server's port, kept across restarts so connected clients reconnect.
PORT_FILE = "nats.port"
LOCK_FILE = "serve.lock"
LOCAL_KEY_FILE = "approver.seed"
DATABASE_FILE = "headgate.db"
WEB_URL_FILE = "web.url"
NOTIFY_KEY_FILE = "notify.key"
SERVICE_SEED_FILE = "service.seed"
HOOK_TOKEN_FILE = "hook.token"
HOOK_URL_FILE = "hook.url"


def sqlite_url(data_dir: Path) -> str:
    """The default database: SQLite in the data dir."""
    return f"sqlite+aiosqlite:///{data_dir / DATABASE_FILE}"


def make_private(data_dir: Path) -> None:
    """Create the data dir, readable by its owner only: it holds the database, the approver
    seed and the NATS credentials."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = data_dir.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(data_dir, mode & 0o700)


def recorded_port(data_dir: Path) -> int | None:
    """The port the embedded server had last time, if one was recorded."""
    try:
        port = int((data_dir / PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def record_port(data_dir: Path, port: int) -> None:
    record(data_dir, PORT_FILE, f"{port}\n")


def record(data_dir: Path, name: str, text: str) -> None:
    """Write a file clients read (`nats.url`, `web.url`, …) whole or not at all: written
    beside it and renamed, so a client polling for it never reads it half written."""
    path = data_dir / name
    partial = path.with_name(f".{name}.{os.getpid()}.partial")
    partial.write_text(text)
    partial.replace(path)


def local_approver(data_dir: Path) -> tuple[ApproverKey, Path, bool]:
    """The data dir's approver key, created (mode 0600) on first use."""
    from workflow.signing import ApproverKey

    path = data_dir / LOCAL_KEY_FILE
    if path.exists():
        return ApproverKey.from_file(path), path, False
    key = ApproverKey.generate()
    key.write(path)
    return key, path, True


def service_key(data_dir: Path, seed: Path | None = None) -> tuple[ServiceKey, Path]:
    """The key the service signs its events and answers with: the configured seed file (an
    external deployment's secret, shared by its replicas), else the data dir's, created (mode
    0600) on first use. Its public key is written to `service.pub`, where clients find it."""
    from workflow.signing import ServiceKey

    path = seed or data_dir / SERVICE_SEED_FILE
    if seed is None and not path.exists():
        key = ServiceKey.generate()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.seed + b"\n")
    else:
        key = ServiceKey.from_file(path)
    public = data_dir / SERVICE_KEY_FILE
    try:
        current = public.read_text().strip()
    except OSError:
        current = None
    if current != key.public_key:
        public.write_text(key.public_key + "\n")
    return key, path


def notify_key(data_dir: Path) -> tuple[bytes, Path]:
    """The key webhooks are signed with when a channel names no secret: created (32 random
    bytes, hex, mode 0600) on first use."""
    path = data_dir / NOTIFY_KEY_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(os.urandom(32).hex() + "\n")
    return path.read_text().strip().encode(), path


def hook_token(data_dir: Path) -> tuple[str, Path]:
    """The bearer token of the HTTP hooks (`serve --hook-listen`): created (32 random bytes,
    hex, mode 0600) on first use."""
    path = data_dir / HOOK_TOKEN_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(os.urandom(32).hex() + "\n")
    return path.read_text().strip(), path


def running_serve(data_dir: Path) -> int | None:
    """The pid of the `serve` that holds this data dir, or None when none runs."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 32).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)  # closing also releases a lock this took
    return None


def lock(data_dir: Path) -> int:
    """Take the data dir for this process; returns the lock's file descriptor (closing it
    releases the lock).

    One service per data dir: it holds the embedded server's store, the SQLite database and
    the local key. A second `serve` there would start a second nats-server on the same
    JetStream store. The kernel drops the lock when the process dies, even by SIGKILL.
    """
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"another headgate serve (pid {holder}) is running with the data dir "
            f"{data_dir}; stop it or pass another --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
