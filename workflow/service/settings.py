"""The service's settings, and the policy they select."""

from __future__ import annotations

import getpass
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow import datadir
from workflow.errors import ConfigError
from workflow.nats_target import tls_context
from workflow.policy.load import load_policy
from workflow.policy.model import Policy, default_policy
from workflow.policy.schema import Approver
from workflow.service.context import Clock
from workflow.service.streams import PER_AGENT_BACKLOG

log = logging.getLogger("headgate")


@dataclass
class Settings:
    data_dir: Path = datadir.DEFAULT
    nats_url: str | None = None
    database_url: str | None = None
    policy_path: Path | None = None
    default_ttl: int = 3600
    prefix: str = "headgate"
    replicas: int = 1
    batch: int = 256
    sweep_interval: float = 1.0
    republish_interval: float = 5.0
    #: A stage whose loop gives no sign of life for this long is reported stalled by /readyz.
    stall_after: float = 60.0
    connect_timeout: float = 60.0
    retry_base_delay: float = 1.0
    per_agent_backlog: int = PER_AGENT_BACKLOG
    nats_user: str | None = None
    nats_password: str | None = None
    nats_creds: str | None = None
    #: An nkey seed file to authenticate with (`--nats-nkey`).
    nats_nkey: str | None = None
    #: TLS to an external NATS server (`--nats-tls-*`): the CAs to trust instead of the
    #: system's, a client certificate and its key, TLS before the server's INFO.
    nats_tls_ca: Path | None = None
    nats_tls_cert: Path | None = None
    nats_tls_key: Path | None = None
    nats_tls_first: bool = False
    #: The embedded server's port: None = the one recorded in the data dir (else a free one),
    #: 0 = a free one.
    nats_port: int | None = None
    metrics_port: int | None = None
    #: Where /metrics, /healthz and /readyz listen (`--metrics-host`).
    metrics_host: str = "127.0.0.1"
    #: Processes running the intake stage, this one included (see `workflow.service.workers`).
    intake_processes: int = 1
    #: This process is one of those extra intake processes (started by the main one).
    intake_worker: bool = False
    #: Logging options handed on to the intake workers' command lines.
    log_options: tuple[str, ...] = ()
    #: The web inbox: served on this port when set (0 = any free port).
    web_port: int | None = None
    web_host: str = "127.0.0.1"
    #: Where browsers reach the inbox (a reverse proxy's URL); default http(s)://localhost:PORT.
    web_url: str | None = None
    web_cert: Path | None = None
    web_key: Path | None = None
    #: The agents' HTTP hooks: served on this HOST:PORT when set (`serve --hook-listen`).
    hook_listen: str | None = None
    #: The embedded server's shared agent user, for agents not registered with `headgate
    #: agents add` (`serve --no-shared-agent` drops it: only registered agents connect).
    shared_agent: bool = True
    #: One more notification channel that gets every event (`serve --notify URL`).
    notify_url: str | None = None
    #: The seed (an nkeys server seed, SN…) the service signs its events and answers with;
    #: None: the data dir's `service.seed`, created on first start (`--service-seed`).
    service_seed: Path | None = None
    #: The service's clock (`ServiceContext.clock`); None: the system's, in UTC.
    clock: Clock | None = None

    @property
    def db_url(self) -> str:
        return self.database_url or datadir.sqlite_url(self.data_dir)

    @property
    def nats_tls(self) -> bool:
        """TLS settings were given: the service's NATS connections speak TLS."""
        return bool(self.nats_tls_ca or self.nats_tls_cert or self.nats_tls_first)

    def nats_ssl_context(self) -> Any | None:
        """The `ssl.SSLContext` of the `--nats-tls-*` settings (None without them); a clear
        `ConfigError` when a file cannot be used or they do not apply."""
        if not self.nats_tls:
            return None
        if not self.nats_url:
            raise ConfigError(
                "--nats-tls-ca, --nats-tls-cert, --nats-tls-key and --nats-tls-first are for an "
                "external NATS server (--nats-url); the embedded server listens on 127.0.0.1 "
                "without TLS"
            )
        if self.nats_tls_key is not None and self.nats_tls_cert is None:
            raise ConfigError("--nats-tls-key needs --nats-tls-cert, the certificate it is for")
        return tls_context(self.nats_tls_ca, self.nats_tls_cert, self.nats_tls_key)


def protect_data_dir(policy: Policy, data_dir: Path) -> Policy:
    """`policy` with this service's data dir (seeds, credentials, database, the JetStream
    store), whatever its name, protected for reading and writing like `.headgate`."""
    root = str(data_dir.resolve())
    globs = [root, f"{root}/**"]
    tables = policy.classifier
    classifier = tables.model_copy(
        update={
            "extra_protected_read": [*tables.extra_protected_read, *globs],
            "extra_protected_write": [*tables.extra_protected_write, *globs],
        }
    )
    return policy.model_copy(update={"classifier": classifier})


def load_settings_policy(settings: Settings) -> Policy:
    """The policy file, or the default policy trusting the data dir's local approver key;
    either way with the data dir protected (`protect_data_dir`)."""
    return protect_data_dir(_settings_policy(settings), settings.data_dir)


def _settings_policy(settings: Settings) -> Policy:
    if settings.policy_path is not None:
        return load_policy(settings.policy_path)
    key, path, created = datadir.local_approver(settings.data_dir)
    name = getpass.getuser() or "local"
    log.info(
        "no policy file: using the default policy; %s the local approver key %s (%s) and "
        "trusting it as approver %r",
        "created" if created else "using",
        path,
        key.public_key,
        name,
    )
    approver = Approver(key=key.public_key, roles=["admin", "approver"], workspaces=["*"])
    return default_policy(ttl_seconds=settings.default_ttl, approvers={name: approver})
