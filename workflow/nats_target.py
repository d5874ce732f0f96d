"""Where a Headgate client connects, and as whom: the NATS URL and credentials of a role.

Pure and light (no NATS client library): the SDKs (`workflow.client.connection`), the CLI and
the per-call hook path (`workflow.adapters.litenats`) all find NATS through `resolve_nats`:

1. the URL and credentials passed explicitly (options, function arguments);
2. the environment: ``HEADGATE_NATS_URL``, ``HEADGATE_NATS_USER`` / ``HEADGATE_NATS_PASSWORD``,
   ``HEADGATE_NATS_CREDS`` (a NATS ``.creds`` file) or ``HEADGATE_NATS_NKEY`` (an nkey seed file);
   TLS: ``HEADGATE_NATS_TLS_CERT`` / ``HEADGATE_NATS_TLS_KEY`` (a client certificate),
   ``HEADGATE_NATS_TLS_CA`` (the CAs to trust), ``HEADGATE_NATS_TLS_HANDSHAKE_FIRST=1`` (TLS
   before the server's INFO, for a server configured with ``handshake_first``);
3. the data dir of a local ``headgate serve`` (``HEADGATE_DATA_DIR``, default ``.headgate``):
   the URL it recorded in ``nats.url`` and the credentials it wrote for each role in
   ``credentials/<role>.nk`` (mode 0600). An agent registered with ``headgate agents add NAME``
   has its own, ``credentials/agents/<NAME>.nk``: a client running as that agent takes them
   instead of the shared agent user's.

A URL and credentials are resolved independently: ``--nats-url`` pointing at the local server
still picks up the data dir's credentials. Each user of the embedded server reads its replies
on its own inbox prefix (``_INBOX.<role>``, ``_INBOX.<agent>``): a user name sets it, and so
does an nkey seed given by hand that is one of the data dir's (or a copy named like one).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from workflow.errors import ConfigError

#: Where `headgate serve` keeps its state, unless told otherwise.
DEFAULT_DATA_DIR = Path(".headgate")
#: The URL of the embedded nats-server, recorded by `serve` in its data dir.
URL_FILE = "nats.url"
#: The public key of the service's signing key, written by `serve` (see `workflow.client.trust`).
SERVICE_KEY_FILE = "service.pub"
#: The data dir's NATS credentials, one nkey seed per role (`credentials/<role>.nk`).
CREDENTIALS_DIR = "credentials"
#: Registered agents' own credentials, under the credentials dir (`agents/<name>.nk`).
AGENTS_DIR = "agents"
#: What an agent name may be: a NATS subject token (letters, digits, `-` and `_`).
AGENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Role(StrEnum):
    """Who a client is towards NATS; each role has its own credentials and permissions."""

    SERVICE = "service"
    AGENT = "agent"
    APPROVER = "approver"


def credentials_file(data_dir: Path, role: Role) -> Path:
    """The nkey seed `serve` writes for `role` in its data dir."""
    return data_dir / CREDENTIALS_DIR / f"{role.value}.nk"


def agent_credentials_file(data_dir: Path, agent: str) -> Path:
    """The nkey seed `headgate agents add` writes for one agent (its own NATS user)."""
    return data_dir / CREDENTIALS_DIR / AGENTS_DIR / f"{agent}.nk"


def inbox_prefix_for(name: str) -> str:
    """The private reply-inbox prefix of a NATS user: `_INBOX.<name>` (see deploy/nats)."""
    return f"_INBOX.{name}"


@dataclass(frozen=True, slots=True, repr=False)
class NatsTarget:
    """A NATS URL (comma-separated for a cluster) and the credentials to present there."""

    url: str
    user: str | None = None
    password: str | None = None
    creds: Path | None = None
    nkey: Path | None = None
    inbox_prefix: str | None = None
    #: Where the URL and the credentials came from, for error messages.
    origin: str = "arguments"
    #: TLS: a client certificate and its key (PEM), the CAs to trust instead of the system's,
    #: and whether to start TLS before the server's INFO (a server with `handshake_first`).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_handshake_first: bool = False

    def __repr__(self) -> str:  # never print a password
        secret = ", password=••••" if self.password else ""
        return (
            f"NatsTarget(url={self.url!r}, user={self.user!r}{secret}, creds={self.creds}, "
            f"nkey={self.nkey}, origin={self.origin!r})"
        )

    @property
    def servers(self) -> list[str]:
        return [s.strip() for s in self.url.split(",") if s.strip()]

    def connect_options(self) -> dict[str, Any]:
        """nats-py `connect` keyword arguments for these credentials."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options["user"] = self.user
        if self.password is not None:
            options["password"] = self.password
        if self.creds is not None:
            options["user_credentials"] = str(self.creds)
        if self.nkey is not None:
            options["nkeys_seed"] = str(self.nkey)
        if self.inbox_prefix is not None:
            options["inbox_prefix"] = self.inbox_prefix
        if self.tls_configured:
            options["tls"] = self.ssl_context()
        if self.tls_handshake_first:
            options["tls_handshake_first"] = True
        return options

    @property
    def tls_configured(self) -> bool:
        """TLS settings were given: TLS is spoken whatever the URL's scheme."""
        return bool(self.tls_cert or self.tls_ca or self.tls_handshake_first)

    def ssl_context(self) -> Any:
        """The `ssl.SSLContext` these settings describe: the CAs to trust (else the system's),
        the client certificate to present (if any)."""
        return tls_context(self.tls_ca, self.tls_cert, self.tls_key)


def tls_context(ca: Path | None, cert: Path | None, key: Path | None) -> Any:
    """An `ssl.SSLContext` for a NATS client: trusting the CAs in `ca` (else the system's),
    presenting the client certificate `cert` with its `key` (if given). A clear `ConfigError`
    names the files when one cannot be used."""
    import ssl  # only where TLS is used: the per-call hook path must start fast

    try:
        context = ssl.create_default_context(cafile=str(ca) if ca else None)
        if cert is not None:
            context.load_cert_chain(str(cert), str(key) if key else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot use the TLS files (certificate {cert}, key {key}, CA {ca}): {exc}"
        ) from exc
    return context


def data_dir_from(data_dir: Path | str | None, env: Mapping[str, str]) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    return Path(env.get("HEADGATE_DATA_DIR") or DEFAULT_DATA_DIR)


def resolve_nats(
    url: str | None = None,
    *,
    role: Role,
    data_dir: Path | str | None = None,
    user: str | None = None,
    password: str | None = None,
    creds: Path | str | None = None,
    nkey: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    agent: str | None = None,
    tls_cert: Path | str | None = None,
    tls_key: Path | str | None = None,
    tls_ca: Path | str | None = None,
    tls_handshake_first: bool | None = None,
) -> NatsTarget:
    """The NATS URL and credentials a client of `role` uses: arguments, then the environment,
    then the data dir of a local `headgate serve` (see the module docstring). An agent client
    names the `agent` it runs as: its own credentials in the data dir win over the shared ones.

    Raises `ConfigError` naming every place it looked when no URL is found anywhere.
    """
    env = os.environ if env is None else env
    where = data_dir_from(data_dir, env)
    origin = "arguments"
    if not url:
        url, origin = env.get("HEADGATE_NATS_URL") or None, "HEADGATE_NATS_URL"
    if not url:
        recorded = where / URL_FILE
        try:
            url = recorded.read_text().strip() or None
        except OSError:
            url = None
        origin = str(recorded)
        if not url:
            raise ConfigError(
                "no NATS URL: pass --nats-url, set HEADGATE_NATS_URL, or run this in the "
                f"directory where `headgate serve` runs (it records its URL in {recorded})."
            )
    user = user or env.get("HEADGATE_NATS_USER") or None
    password = password or env.get("HEADGATE_NATS_PASSWORD") or None
    creds_path = _path(creds or env.get("HEADGATE_NATS_CREDS"))
    nkey_path = _path(nkey or env.get("HEADGATE_NATS_NKEY"))
    inbox = inbox_prefix_for(user) if user else None
    if user is None and nkey_path is not None:
        inbox = _inbox_of_seed(nkey_path, where, role, agent)
    if user is None and creds_path is None and nkey_path is None:
        local, inbox_name = credentials_file(where, role), role.value
        if role is Role.AGENT and agent is not None and AGENT_NAME.fullmatch(agent):
            own = agent_credentials_file(where, agent)
            if own.is_file():
                local, inbox_name = own, agent
        if local.is_file():
            nkey_path, inbox = local, inbox_prefix_for(inbox_name)
            origin = f"{origin}; credentials {local}"
    if tls_handshake_first is None:
        first = env.get("HEADGATE_NATS_TLS_HANDSHAKE_FIRST", "").strip().lower()
        tls_handshake_first = first in {"1", "true", "yes", "on"}
    return NatsTarget(
        url=url, user=user, password=password, creds=creds_path, nkey=nkey_path,
        inbox_prefix=inbox, origin=origin,
        tls_cert=_path(tls_cert or env.get("HEADGATE_NATS_TLS_CERT")),
        tls_key=_path(tls_key or env.get("HEADGATE_NATS_TLS_KEY")),
        tls_ca=_path(tls_ca or env.get("HEADGATE_NATS_TLS_CA")),
        tls_handshake_first=tls_handshake_first,
    )  # fmt: skip


def _inbox_of_seed(seed: Path, where: Path, role: Role, agent: str | None) -> str | None:
    """The reply-inbox prefix of the embedded server's user an nkey seed file given by hand
    (`--nats-nkey`, `HEADGATE_NATS_NKEY`) belongs to: `_INBOX.<role>` for a role's seed,
    `_INBOX.<name>` for a registered agent's — the only inboxes those users may read.

    Found by the seed itself among the data dir's (`credentials/<role>.nk`,
    `credentials/agents/<name>.nk`); a copy elsewhere, with no data dir, by the name it was
    written under (`approver.nk`, or `<agent>.nk` for the agent the client runs as). None
    when neither says (a server configured by hand: its own inbox rules)."""
    try:
        text = seed.read_text().strip()
    except OSError:
        return None  # connecting says why the file cannot be read
    owners = [(credentials_file(where, r), r.value) for r in Role]
    with contextlib.suppress(OSError):
        owners += [
            (path, path.stem)
            for path in sorted((where / CREDENTIALS_DIR / AGENTS_DIR).glob("*.nk"))
            if AGENT_NAME.fullmatch(path.stem)
        ]
    for path, name in owners:
        with contextlib.suppress(OSError):
            if path.read_text().strip() == text:
                return inbox_prefix_for(name)
    name = seed.name.removesuffix(".nk")
    if name in {r.value for r in Role} and name != Role.SERVICE.value:
        return inbox_prefix_for(name)
    if role is Role.AGENT and agent is not None and name == agent and AGENT_NAME.fullmatch(name):
        return inbox_prefix_for(name)
    return None


def refusal_hint(target: NatsTarget) -> str:
    """What to add to "refused the credentials" when they were the shared agent user's."""
    if target.nkey is not None and target.nkey.name == f"{Role.AGENT.value}.nk":
        return (
            " These are the shared agent user's: a `headgate serve --no-shared-agent` admits "
            "registered agents only (`headgate agents add NAME`, then run as NAME)."
        )
    return ""


def _path(value: Path | str | None) -> Path | None:
    return Path(value) if value else None
