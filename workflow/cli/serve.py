"""`headgate serve`."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from workflow.cli.common import DEFAULT_DATA_DIR, DataDir, NatsUrl, Prefix
from workflow.cli.logs import setup_logging


class LogFormat(StrEnum):
    console = "console"
    json = "json"


def serve(
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="HEADGATE_DATABASE_URL",
            help="sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB. "
            "Default: SQLite in the data dir.",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            envvar="HEADGATE_POLICY",
            help="Policy file (TOML). Default: the built-in policy, trusting a local approver "
            "key kept in the data dir.",
        ),
    ] = None,
    default_ttl: Annotated[
        int, typer.Option("--default-ttl", min=1, help="Seconds a held request waits for approval.")
    ] = 3600,
    prefix: Prefix = "headgate",
    replicas: Annotated[
        int,
        typer.Option(
            "--replicas",
            envvar="HEADGATE_STREAM_REPLICAS",
            min=1,
            max=5,
            help="JetStream replicas per stream (3 on a 3-node cluster).",
        ),
    ] = 1,
    nats_user: Annotated[
        str | None, typer.Option("--nats-user", envvar="HEADGATE_NATS_USER", help="NATS user.")
    ] = None,
    nats_password: Annotated[
        str | None,
        typer.Option("--nats-password", envvar="HEADGATE_NATS_PASSWORD", help="NATS password."),
    ] = None,
    nats_creds: Annotated[
        str | None,
        typer.Option("--nats-creds", envvar="HEADGATE_NATS_CREDS", help="NATS credentials file."),
    ] = None,
    nats_nkey: Annotated[
        str | None,
        typer.Option("--nats-nkey", envvar="HEADGATE_NATS_NKEY", help="NATS nkey seed file."),
    ] = None,
    nats_tls_ca: Annotated[
        Path | None,
        typer.Option(
            "--nats-tls-ca",
            envvar="HEADGATE_NATS_TLS_CA",
            help="TLS to an external NATS server: the CA certificates (PEM) to trust instead of "
            "the system's.",
        ),
    ] = None,
    nats_tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--nats-tls-cert",
            envvar="HEADGATE_NATS_TLS_CERT",
            help="TLS: the client certificate (PEM) to present, for a server that verifies "
            "clients.",
        ),
    ] = None,
    nats_tls_key: Annotated[
        Path | None,
        typer.Option(
            "--nats-tls-key",
            envvar="HEADGATE_NATS_TLS_KEY",
            help="TLS: the client certificate's private key (PEM).",
        ),
    ] = None,
    nats_tls_first: Annotated[
        bool,
        typer.Option(
            "--nats-tls-first",
            envvar="HEADGATE_NATS_TLS_HANDSHAKE_FIRST",
            help="TLS from the first byte, before the server's INFO (a server with "
            "`handshake_first`).",
        ),
    ] = False,
    nats_port: Annotated[
        int | None,
        typer.Option(
            "--nats-port",
            envvar="HEADGATE_NATS_PORT",
            min=0,
            max=65535,
            help="Port of the embedded nats-server (loopback). Default: the one it had last "
            "time in this data dir, so connected clients reconnect after a restart; 0 = a "
            "free one.",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            envvar="HEADGATE_METRICS_PORT",
            help="Serve Prometheus /metrics, /healthz and /readyz on this port (0 = any free).",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host",
            envvar="HEADGATE_METRICS_HOST",
            help="Address the metrics port listens on; 0.0.0.0 for every interface (a "
            "container, a scraper on another host).",
        ),
    ] = "127.0.0.1",
    connect_timeout: Annotated[
        float,
        typer.Option(
            "--connect-timeout",
            envvar="HEADGATE_CONNECT_TIMEOUT",
            min=0.1,
            help="Seconds to keep retrying an unreachable NATS server at start.",
        ),
    ] = 60.0,
    intake_processes: Annotated[
        int,
        typer.Option(
            "--intake-processes",
            envvar="HEADGATE_INTAKE_PROCESSES",
            min=1,
            max=64,
            help="Processes running the intake stage (the hot path), this one included: one "
            "Python process uses one core. Extra processes export metrics on the next ports "
            "after --metrics-port.",
        ),
    ] = 1,
    service_seed: Annotated[
        Path | None,
        typer.Option(
            "--service-seed",
            envvar="HEADGATE_SERVICE_SEED",
            exists=True,
            dir_okay=False,
            help="nkeys server seed (SN…) the service signs its events and answers with; the "
            "same file for every replica. Default: the data dir's service.seed, created on "
            "first start. Its public key is written to the data dir's service.pub.",
        ),
    ] = None,
    intake_worker: Annotated[
        bool,
        typer.Option("--intake-worker", hidden=True, help="Run as an extra intake process."),
    ] = False,
    web_port: Annotated[
        int | None,
        typer.Option(
            "--web-port",
            envvar="HEADGATE_WEB_PORT",
            min=0,
            max=65535,
            help="Serve the web inbox on this port (0 = any free port). Off by default.",
        ),
    ] = None,
    web_host: Annotated[
        str,
        typer.Option(
            "--web-host",
            envvar="HEADGATE_WEB_HOST",
            help="Address the web inbox listens on. Keep 127.0.0.1 behind a reverse proxy.",
        ),
    ] = "127.0.0.1",
    web_url: Annotated[
        str | None,
        typer.Option(
            "--web-url",
            envvar="HEADGATE_WEB_URL",
            help="The inbox's address as browsers reach it, e.g. https://headgate.example.com "
            "behind a reverse proxy. Default: http://localhost:PORT (https with --web-cert). "
            "Passkeys are bound to its host name.",
        ),
    ] = None,
    web_cert: Annotated[
        Path | None,
        typer.Option("--web-cert", envvar="HEADGATE_WEB_CERT", help="TLS certificate (PEM)."),
    ] = None,
    web_key: Annotated[
        Path | None,
        typer.Option("--web-key", envvar="HEADGATE_WEB_KEY", help="TLS private key (PEM)."),
    ] = None,
    hook_listen: Annotated[
        str | None,
        typer.Option(
            "--hook-listen",
            envvar="HEADGATE_HOOK_LISTEN",
            help="Serve the agents' HTTP hooks (POST /hooks/claude-code) on HOST:PORT, e.g. "
            "127.0.0.1:8788; bearer token in the data dir's hook.token. Off by default: an "
            "HTTP hook fails open in Claude Code (serve down = the call goes ahead), so the "
            "command hook stays the safe default.",
        ),
    ] = None,
    shared_agent: Annotated[
        bool,
        typer.Option(
            "--shared-agent/--no-shared-agent",
            envvar="HEADGATE_SHARED_AGENT",
            help="Keep the embedded server's shared agent user (credentials/agent.nk), which "
            "any agent not registered with `headgate agents add` connects as. It may act as "
            "any unregistered agent and is denied the subjects of registered ones. "
            "--no-shared-agent drops it (and the shared HTTP hook token): only registered "
            "agents connect.",
        ),
    ] = True,
    notify: Annotated[
        str | None,
        typer.Option(
            "--notify",
            envvar="HEADGATE_NOTIFY_URL",
            help="Send every held request and its outcome here: an http(s) webhook (JSON, "
            "HMAC-signed with $HEADGATE_NOTIFY_SECRET or the data dir's notify.key) or an "
            "apprise URL (slack://…, ntfy://…, mailto://…).",
        ),
    ] = None,
    log_format: Annotated[LogFormat, typer.Option("--log-format")] = LogFormat.console,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """Run the gateway. Without --nats-url it starts an embedded nats-server with JetStream.

    The embedded server listens on loopback and admits only the users `serve` writes into
    the data dir (`credentials/service.nk`, `agent.nk`, `approver.nk`, mode 0600), and one user
    per agent registered with `headgate agents add` (applied while it runs; SIGHUP applies at
    once, and reloads the policy); the CLI and the SDKs find them there.
    """
    import asyncio

    setup_logging(
        log_format.value,
        log_level,
        process=f"intake worker pid {os.getpid()}" if intake_worker else None,
    )
    from workflow.service.allocator import limit_arenas
    from workflow.service.lifecycle import Service
    from workflow.service.settings import Settings

    limit_arenas()  # before any thread starts

    settings = Settings(
        data_dir=data_dir,
        nats_url=nats_url,
        database_url=database_url,
        policy_path=policy,
        default_ttl=default_ttl,
        prefix=prefix,
        replicas=replicas,
        nats_user=nats_user,
        nats_password=nats_password,
        nats_creds=nats_creds,
        nats_nkey=nats_nkey,
        nats_tls_ca=nats_tls_ca,
        nats_tls_cert=nats_tls_cert,
        nats_tls_key=nats_tls_key,
        nats_tls_first=nats_tls_first,
        nats_port=nats_port,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        connect_timeout=connect_timeout,
        intake_processes=intake_processes,
        intake_worker=intake_worker,
        log_options=("--log-format", log_format.value, "--log-level", log_level),
        web_port=web_port,
        web_host=web_host,
        web_url=web_url,
        web_cert=web_cert,
        web_key=web_key,
        notify_url=notify,
        hook_listen=hook_listen,
        shared_agent=shared_agent,
        service_seed=service_seed,
    )

    async def main() -> None:
        service = Service(settings)
        service.install_signal_handlers()
        await service.run()

    asyncio.run(main())
