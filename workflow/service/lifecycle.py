"""The Headgate service's lifecycle: connect, start the stages, reload the policy, stop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faststream.nats import NatsBroker
from faststream.nats.security import NatsCredentials, NatsNKey, NatsSecurity, NatsUserPassword
from faststream.security import BaseSecurity
from nats.aio.client import Client as NATS

from workflow import agent_identities, datadir
from workflow.effects import AuditEntry
from workflow.errors import ConfigError, ConnectError, HeadgateError
from workflow.policy.coverage import approval_gaps
from workflow.policy.load import load_policy
from workflow.policy.model import Policy
from workflow.service import memtrace
from workflow.service.agent_access import AgentAccess
from workflow.service.background import Auditor, every
from workflow.service.broker import build_app
from workflow.service.collector import Collector
from workflow.service.context import ServiceContext
from workflow.service.embedded import EmbeddedNats
from workflow.service.embedded_access import prepare_access
from workflow.service.held import HeldClassifications
from workflow.service.intake import Intake
from workflow.service.metrics import HealthServer
from workflow.service.outreach import Outreach
from workflow.service.retention import pruner
from workflow.service.settings import Settings, load_settings_policy, protect_data_dir
from workflow.service.stage import PullStage, RetryPolicy
from workflow.service.streams import (
    PRIORITY_FIRST,
    PRIORITY_OVERFLOW,
    ensure_streams,
    service_consumers,
)
from workflow.service.supervisor import Supervisor
from workflow.service.workers import IntakeWorkers, worker_argv
from workflow.signing import ServiceKey
from workflow.store.engine import in_memory_sqlite
from workflow.store.maintenance import autovacuum
from workflow.store.repo import Store
from workflow.subjects import Subjects

if TYPE_CHECKING:  # loaded only when `--hook-listen` serves them
    from workflow.service.hook_endpoint import HookEndpoint

log = logging.getLogger("headgate")


async def connect_nats(
    settings: Settings, url: str, *, name: str = "headgate", nkey: str | None = None
) -> NATS:
    """Connect with retries and backoff; a clear error when the server stays unreachable."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.connect_timeout
    delay = 0.5

    async def on_error(exc: Exception) -> None:
        log.warning("NATS: %s", exc)

    current: list[NATS] = []
    tls: dict[str, Any] = {}
    if settings.nats_tls:
        tls = {"tls": settings.nats_ssl_context(), "tls_handshake_first": settings.nats_tls_first}

    async def on_disconnect() -> None:
        if current and (current[0].is_draining or current[0].is_closed):
            return  # our own shutdown
        log.warning("NATS: disconnected; reconnecting")

    async def on_reconnect() -> None:
        log.info("NATS: reconnected")

    while True:
        nc = NATS()
        current[:] = [nc]
        attempt = min(5.0, max(deadline - loop.time(), 0.5))
        try:
            # nats-py retries a failed first connect itself when reconnecting is allowed (for
            # ever, with max_reconnect_attempts=-1), so each attempt is bounded here.
            await asyncio.wait_for(
                nc.connect(
                    servers=url.split(","),
                    name=name,
                    connect_timeout=2,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1,
                    error_cb=on_error,
                    disconnected_cb=on_disconnect,
                    reconnected_cb=on_reconnect,
                    user=settings.nats_user,
                    password=settings.nats_password,
                    user_credentials=settings.nats_creds,
                    nkeys_seed=nkey if nkey is not None else settings.nats_nkey,
                    **tls,
                ),
                attempt,
            )
            return nc
        except Exception as exc:
            with contextlib.suppress(Exception):
                await nc.close()
            reason = str(exc) or type(exc).__name__
            if loop.time() + delay > deadline:
                raise ConnectError(
                    f"cannot reach NATS at {url} ({reason}); is the server running? Pass "
                    "--nats-url, or omit it to start an embedded server."
                ) from exc
            log.warning("NATS at %s not reachable (%s); retrying in %.1fs", url, reason, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


class Service:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.subjects = Subjects(settings.prefix)
        self.embedded: EmbeddedNats | None = None
        self.ctx: ServiceContext | None = None
        self.stopping = asyncio.Event()
        self.supervisor = Supervisor(self.stopping)
        #: The FastStream application (API, auditor); None in an intake worker.
        self.broker: NatsBroker | None = None
        self.stages: list[PullStage] = []
        self.ready = False
        self.url = ""
        self._policy_mtime: float | None = None
        self.health: HealthServer | None = None
        self._lock_fd: int | None = None
        self.workers: IntakeWorkers | None = None
        self._reload: asyncio.Future[bool] | None = None
        self._access_seed: Path | None = None
        self.outreach: Outreach | None = None
        self.hooks: HookEndpoint | None = None
        #: Keeps the embedded server's agent users and the hook tokens in step with the
        #: registered agents (None in an intake worker).
        self.agent_access: AgentAccess | None = None
        self._agents_loaded: agent_identities.Fingerprint | None = None
        #: The nkey seed the service's connections authenticate with (None: none).
        self._nkey: str | None = None

    def _lock_data_dir(self) -> None:
        self._lock_fd = datadir.lock(self.settings.data_dir)

    def _unlock_data_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    async def start(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        if s.intake_worker:
            if not s.nats_url:
                raise ConfigError("an intake worker needs --nats-url (the main process gives it)")
            await self._start()  # the main process holds the data dir
            return
        if s.intake_processes > 1 and in_memory_sqlite(s.db_url):
            raise ConfigError(
                "--intake-processes above 1 needs a database the processes share: an SQLite "
                "file or PostgreSQL, not an in-memory database"
            )
        datadir.make_private(s.data_dir)
        self._lock_data_dir()
        try:
            await self._start()
        except BaseException:
            if self.health is not None:
                await self.health.stop()
            if self.hooks is not None:
                await self.hooks.stop()
            self._unlock_data_dir()
            raise

    def _service_key(self) -> ServiceKey:
        """The key every event and answer is signed with (see `datadir.service_key`)."""
        s = self.settings
        signer, _ = datadir.service_key(s.data_dir, s.service_seed)
        if s.service_seed is None and s.database_url and not s.intake_worker:
            log.warning(
                "signing with this data dir's own service key %s: replicas that share the "
                "database must share one key (--service-seed), or clients trust only one of "
                "them", signer.public_key,
            )  # fmt: skip
        return signer

    def _start_housekeeping(self, ctx: ServiceContext) -> None:
        """The main process's background loops: sweeper, republisher, pruner (and the memory
        trace when `HEADGATE_TRACEMALLOC` asks for it)."""
        s = self.settings
        self.supervisor.start(
            "sweeper", lambda _: every(s.sweep_interval, "sweep", ctx, self.stopping)
        )
        self.supervisor.start(
            "republisher",
            lambda _: every(s.republish_interval, "republish", ctx, self.stopping),
        )
        self.supervisor.start("pruner", lambda _: pruner(ctx, s.data_dir, self.stopping))
        traced = memtrace.spec_from_env()
        if traced is not None:
            self.supervisor.start(
                "memory trace", lambda _: memtrace.trace(s.data_dir, traced, self.stopping)
            )

    async def _start(self) -> None:
        s = self.settings
        policy = load_settings_policy(s)
        _warn_gaps(policy, s.policy_path)
        if s.metrics_port is not None:  # first: a taken port stops the start before anything
            self.health = HealthServer(None, self.readiness, s.metrics_host, s.metrics_port)
            await self.health.start()
        self._bind_hooks()  # early too: a taken port stops the start before anything
        s.nats_ssl_context()  # a TLS file that cannot be used stops the start before anything
        # The database before NATS: one that cannot be opened stops the start before a server
        # is started for nothing. PostgreSQL connections for what runs at once: an intake
        # worker's stage (and a spare), or the main process's stages, periodic tasks, API and
        # web inbox.
        store = await Store.open(s.db_url, pool_size=2 if s.intake_worker else 8)
        try:
            nkey = s.nats_nkey
            if s.nats_url:
                self.url = s.nats_url
            else:
                self.url, nkey = self._start_embedded(), str(self._access_seed)
            self._nkey = nkey
            nc = await connect_nats(s, self.url, nkey=nkey)
        except BaseException:
            await store.close()
            self._stop_embedded()
            raise
        js = nc.jetstream(timeout=10)
        if not s.intake_worker:  # a worker starts once the main process has made them
            try:
                await ensure_streams(
                    js, self.subjects, s.replicas, per_agent_backlog=s.per_agent_backlog
                )
            except Exception as exc:
                await nc.close()
                await store.close()
                self._stop_embedded()
                raise HeadgateError(f"cannot create the JetStream streams: {exc}") from exc
        signer = self._service_key()
        self.ctx = ctx = ServiceContext(
            nc, js, store, self.subjects, policy,
            retry=RetryPolicy(base_delay=s.retry_base_delay), signer=signer,
            # An intake worker keeps no held classifications: no collector here takes them.
            held=None if s.intake_worker else HeldClassifications(),
        )  # fmt: skip
        if s.clock is not None:
            ctx.clock = s.clock
        consumers = service_consumers(self.subjects)
        m = ctx.metrics
        self.supervisor.metrics = m
        intake = Intake(ctx)
        self.stages = [
            # One batch in hand where the collector runs. With two (`overlap=2`: the next
            # batch classified while the last one commits and waits for its PubAcks) the event
            # loop was never free at full speed and the decisions waiting to be collected
            # waited behind batch after batch: an approved call's p50 at the mix's maximum went
            # from 0.3-1.0 x the read p50 to 10-11 x on SQLite (docs/bench.md, eighth pass).
            # An intake worker process has no collector: it takes two, so a batch does not
            # wait for the last one's PubAcks (PostgreSQL, 2 processes, five alternated pairs:
            # read p50 at 500/s 8.6 -> 7.9 x the relay, the mix's maximum +5.6 %; docs/bench.md,
            # fifteenth pass).
            # Where there are intake workers, the main process asks for proposals at overflow
            # priority: JetStream hands it only what the workers' requests have no room for,
            # so at a moderate rate every proposal goes to a worker, whose event loop is not
            # shared with the decisions (docs/bench.md, sixteenth pass).
            PullStage(
                nc, js, consumers["intake"], intake, batch=s.batch,
                overlap=2 if s.intake_worker else 1, metrics=m, settle=intake.settle,
                priority=PRIORITY_OVERFLOW
                if s.intake_processes > 1 and not s.intake_worker
                else PRIORITY_FIRST,
            )
        ]  # fmt: skip
        if not s.intake_worker:
            await _warn_autovacuum(store, policy)
            await store.audit.append(
                [AuditEntry("service.start", "headgate", {"policy_revision": policy.revision})],
                ctx.now(),
            )
            collector = Collector(ctx)
            # The auditor is a batch stage too: a fetched batch of reports is recorded in one
            # transaction, in stream order, so an agent's first report of a release is the one
            # recorded (a FastStream pull subscriber handles a fetched batch concurrently).
            auditor = Auditor(ctx)
            self.stages += [
                # Two batches of decisions in hand: the next is taken while the last one waits
                # for its PubAcks (its plan, commit and events are serialised by the urgent
                # turn, so a batch is planned on what the one before it committed). With one
                # batch of 64 the collector was the bottleneck at the mix maximum: its batches
                # were always full and an approved call waited 0.6-2 s in the server before
                # the collector took it (docs/bench.md, tenth pass).
                PullStage(
                    nc, js, consumers["collector"], collector, batch=128, overlap=2, metrics=m,
                    settle=collector.settle,
                ),
                PullStage(
                    nc, js, consumers["auditor"], auditor, batch=64, metrics=m,
                    settle=auditor.settle,
                ),
            ]  # fmt: skip
            # Before the stages run: the notifier must not miss the first held request.
            await self._start_outreach(ctx)
        for stage in self.stages:
            self.supervisor.start(
                stage.spec.durable,
                partial(stage.run, self.stopping),
                stall_after=s.stall_after,
            )
        if not s.intake_worker:
            self._start_housekeeping(ctx)
        if s.policy_path is not None:
            self._policy_mtime = s.policy_path.stat().st_mtime
            self.supervisor.start("policy watcher", lambda _: self._watch_policy())
        if not s.intake_worker:
            await self._start_broker()
            await self._start_hooks(signer)
            await self._start_agent_access()
            if s.intake_processes > 1:
                self.workers = IntakeWorkers(
                    [self._worker_options(i) for i in range(s.intake_processes - 1)],
                    env={"HEADGATE_NATS_PASSWORD": s.nats_password} if s.nats_password else {},
                )
                self.workers.start()
        self._record_url()
        if self.health is not None:
            self.health.metrics = ctx.metrics
        # What is alive now (modules, policy, classifier tables, parsers, schemas) lives as
        # long as the service: keep it out of the collector's full passes, which otherwise
        # scan it all and paused the loop for 65–75 ms every few seconds under load.
        gc.freeze()
        self.ready = True
        log.info(
            "headgate %s: %d stages, database %s, policy %s (revision %s)",
            "intake worker ready" if s.intake_worker else "ready",
            len(self.stages),
            _redact(s.db_url),
            s.policy_path or "default",
            policy.revision,
        )

    def _record_url(self) -> None:
        """The embedded server's URL in the data dir, where clients find it: written once the
        API answers, so the first hook or CLI call that reads it is not refused for "no
        Headgate service answers"."""
        if self.embedded is not None:
            datadir.record(self.settings.data_dir, datadir.URL_FILE, self.url + "\n")

    def _bind_hooks(self) -> None:
        s = self.settings
        if s.hook_listen is not None and not s.intake_worker:
            from workflow.service.hook_endpoint import HookEndpoint

            self.hooks = HookEndpoint(s.hook_listen, s.data_dir, shared_token=s.shared_agent)

    async def _start_hooks(self, signer: ServiceKey) -> None:
        """The HTTP hooks, on a NATS connection of their own (the agents' traffic)."""
        if self.hooks is None or self.ctx is None:
            return
        nc = await connect_nats(self.settings, self.url, name="headgate-hooks", nkey=self._nkey)
        await self.hooks.start(
            nc, prefix=self.subjects.prefix, service_key=signer.public_key,
            metrics=self.ctx.metrics,
        )  # fmt: skip

    async def _start_agent_access(self) -> None:
        """Apply the registered agents now (the embedded server read them at its start) and
        whenever they change."""
        hooks = self.hooks

        def tokens(found: dict[str, str]) -> None:
            if hooks is not None:
                hooks.agent_tokens = found

        self.agent_access = access = AgentAccess(
            self.settings.data_dir, self.subjects, server=self.embedded,
            shared_agent=self.settings.shared_agent, on_tokens=tokens, loaded=self._agents_loaded,
        )  # fmt: skip
        await access.apply("start")
        self.supervisor.start("agent identities", lambda _: access.watch(self.stopping))

    async def _start_outreach(self, ctx: ServiceContext) -> None:
        """The web inbox, the notifier and the escalator; on failure nothing is left open."""
        self.outreach = Outreach(
            ctx, self.settings, servers=self.url.split(","),
            connect={"security": _security(self.settings, self._nkey)},
        )  # fmt: skip
        try:
            await self.outreach.start()
        except BaseException:
            await self.outreach.stop()
            await ctx.nc.close()
            await ctx.store.close()
            self._stop_embedded()
            raise

    async def _start_broker(self) -> None:
        """Start the FastStream application: the API."""
        s = self.settings
        self.broker = build_app(
            self.subjects,
            self.url.split(","),
            context=lambda: self.ctx,
            security=_security(s, self._nkey),
        )
        await self.broker.start()
        # The subscriptions are on the server once it has answered a PING after them: only
        # then do clients that find `nats.url` (written next) reach the API.
        await self.broker.connection.flush(timeout=10)

    def _start_embedded(self) -> str:
        """Start the embedded nats-server with its accounts, on the port it had last time
        (clients connected before a restart reconnect to the same URL), and record its URL."""
        s = self.settings
        store = s.data_dir / "nats"
        self._agents_loaded = agent_identities.fingerprint(s.data_dir)  # before it is read
        access = prepare_access(s.data_dir, store, self.subjects, shared_agent=s.shared_agent)
        self._access_seed = access.service_seed
        recorded = datadir.recorded_port(s.data_dir)
        port = s.nats_port if s.nats_port is not None else (recorded or 0)
        # On this (the main) thread: the server is tied to the thread that starts it.
        try:
            url = self._embedded_on(store, access.config, port)
        except HeadgateError as exc:
            if s.nats_port is not None or not port or "address already in use" not in str(exc):
                raise _listen_error(exc, port) from exc
            log.warning(
                "port %d of the embedded nats-server (recorded in %s) is taken; using a free "
                "port: clients given the old URL must be given the new one",
                port, s.data_dir / datadir.PORT_FILE,
            )  # fmt: skip
            url = self._embedded_on(store, access.config, 0)
        assert self.embedded is not None
        datadir.record_port(s.data_dir, _port_of(url))
        log.info(
            "embedded nats-server with JetStream listening on %s (credentials in %s)",
            url, access.service_seed.parent,
        )  # fmt: skip
        return url

    def _embedded_on(self, store: Path, config: Path, port: int) -> str:
        self.embedded = EmbeddedNats(store_dir=store, port=port or -1, config=config)
        return self.embedded.start()

    def _worker_options(self, index: int) -> list[str]:
        """The command line of intake worker `index` (0-based): this service's settings."""
        s = self.settings
        options = [
            "--nats-url", self.url, "--database-url", s.db_url, "--data-dir", str(s.data_dir),
            "--prefix", s.prefix, "--default-ttl", str(s.default_ttl),
            "--connect-timeout", str(s.connect_timeout), *s.log_options,
        ]  # fmt: skip
        if s.policy_path is not None:
            options += ["--policy", str(s.policy_path)]
        if s.service_seed is not None:
            options += ["--service-seed", str(s.service_seed)]
        if s.nats_user:
            options += ["--nats-user", s.nats_user]
        if s.nats_creds:
            options += ["--nats-creds", s.nats_creds]
        if self.embedded is not None:
            options += ["--nats-nkey", str(self._access_seed)]
        elif s.nats_nkey:
            options += ["--nats-nkey", s.nats_nkey]
        for flag, path in (
            ("--nats-tls-ca", s.nats_tls_ca), ("--nats-tls-cert", s.nats_tls_cert),
            ("--nats-tls-key", s.nats_tls_key),
        ):  # fmt: skip
            if path is not None:
                options += [flag, str(path)]
        if s.nats_tls_first:
            options += ["--nats-tls-first"]
        if s.metrics_port is not None:  # one scrape target per process: the next ports up
            options += ["--metrics-port", str(s.metrics_port + index + 1 if s.metrics_port else 0)]
            options += ["--metrics-host", s.metrics_host]
        return worker_argv(options)

    async def readiness(self) -> tuple[bool, dict[str, str]]:
        """Ready = started, connected to NATS, the database answers, the streams exist, and
        every stage and periodic task runs (none stopped or stalled)."""
        checks: dict[str, str] = {}
        ctx = self.ctx
        checks["service"] = "ok" if self.ready else "starting or stopping"
        if ctx is None:
            return False, checks
        checks["nats"] = "ok" if ctx.nc.is_connected else "disconnected"
        try:
            await asyncio.wait_for(ctx.store.ping(), 2)
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"unavailable: {exc or type(exc).__name__}"
        try:
            await asyncio.wait_for(ctx.js.stream_info(self.subjects.stream("proposals")), 2)
            checks["streams"] = "ok"
        except Exception as exc:
            checks["streams"] = f"missing: {exc or type(exc).__name__}"
        if self.broker is not None:
            try:
                api_ok = await asyncio.wait_for(self.broker.ping(2), 3)
            except Exception:
                api_ok = False
            checks["api"] = "ok" if api_ok else "the API connection is down"
        problems = self.supervisor.problems()
        checks["stages"] = (
            "; ".join(f"{name} {why}" for name, why in sorted(problems.items())) or "ok"
        )
        return all(v == "ok" for v in checks.values()), checks

    async def reload_policy(self, reason: str = "SIGHUP") -> bool:
        """Load the policy file again; keep the old policy when the new one is invalid."""
        ctx, path = self.ctx, self.settings.policy_path
        if ctx is None or path is None:
            return False
        try:
            policy = protect_data_dir(
                await asyncio.to_thread(load_policy, path), self.settings.data_dir
            )
        except HeadgateError as exc:
            log.error(
                "policy reload (%s) refused, keeping revision %s: %s",
                reason,
                ctx.policy.revision,
                exc,
            )
            return False
        _warn_gaps(policy, path)
        old, ctx.policy = ctx.policy.revision, policy
        await ctx.store.audit.append(
            [
                AuditEntry(
                    "policy.reload",
                    "headgate",
                    {"from": old, "to": policy.revision, "trigger": reason},
                )
            ],
            ctx.now(),
        )
        log.info("policy reloaded (%s): revision %s -> %s", reason, old, policy.revision)
        if self.outreach is not None:
            try:
                await self.outreach.reload()
            except HeadgateError as exc:
                log.error("notifications keep the channels they had: %s", exc)
        return True

    async def _watch_policy(self) -> None:
        path = self.settings.policy_path
        assert path is not None
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 2.0)
            with contextlib.suppress(OSError):
                mtime = path.stat().st_mtime
                if mtime != self._policy_mtime:
                    self._policy_mtime = mtime
                    await self.reload_policy("file changed")

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)

    def _on_sighup(self) -> None:
        """Reload the policy, here and in the intake workers (they reload their own copy),
        and look at the registered agents at once."""
        self._reload = asyncio.ensure_future(self.reload_policy("SIGHUP"))
        if self.agent_access is not None:
            self.agent_access.wake()
        if self.workers is not None:
            self.workers.signal(signal.SIGHUP)

    async def stop(self) -> None:
        """Stop taking new messages, let in-flight batches finish, then close everything."""
        self.ready = False
        self.stopping.set()
        if self.hooks is not None:
            await self.hooks.stop()
        if self.workers is not None:
            await self.workers.stop()
        if self.health is not None:
            await self.health.stop()
        if self.outreach is not None:
            await self.outreach.stop()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.broker.stop(), 5)
        await self.supervisor.wait()
        if self.ctx is not None:
            await self.ctx.marker.flush()  # the stages are done: write their last marks
            nc = self.ctx.nc
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.drain(), 5)
            if not nc.is_closed:  # NATS unreachable or reconnecting: drain refused, close
                with contextlib.suppress(Exception):
                    await nc.close()
            await self.ctx.store.close()
        self._stop_embedded()
        self._unlock_data_dir()
        log.info("headgate stopped")

    def _stop_embedded(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()
            url_file = self.settings.data_dir / datadir.URL_FILE
            with contextlib.suppress(OSError):
                url_file.unlink()

    async def run(self) -> None:
        await self.start()
        try:
            await self.stopping.wait()
        finally:
            await self.stop()


def _warn_gaps(policy: Policy, path: Path | None) -> None:
    """Log each rule that holds calls no registered approver can release."""
    for gap in approval_gaps(policy):
        log.warning("policy %s: %s", path or "(default)", gap.sentence())


async def _warn_autovacuum(store: Store, policy: Policy) -> None:
    """On PostgreSQL with `[retention]`: say so when autovacuum cannot reach the tables the
    pruner deletes from (their space would never be reused)."""
    if not (policy.retention.proposals or policy.retention.audit):
        return
    try:
        found = await autovacuum(store.db)
    except Exception as exc:  # a catalog the role may not read: say so, start anyway
        log.warning("retention on PostgreSQL: cannot tell whether autovacuum runs (%s)", exc)
        return
    problem = found.problem() if found is not None else None
    if problem is not None:
        log.warning("%s", problem)


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _listen_error(exc: HeadgateError, port: int) -> HeadgateError:
    if port and "address already in use" in str(exc):
        return ConfigError(
            f"the embedded nats-server cannot listen on 127.0.0.1:{port}: the port is taken; "
            "pass another --nats-port, or --nats-port 0 for a free one"
        )
    return exc


def _security(s: Settings, nkey: str | None) -> BaseSecurity | None:
    """The FastStream applications authenticate, and speak TLS, as the service's own
    connection does."""
    tls: dict[str, Any] = {}
    if s.nats_tls:
        tls = {"ssl_context": s.nats_ssl_context(), "tls_handshake_first": s.nats_tls_first}
    if s.nats_creds:
        return NatsCredentials(Path(s.nats_creds), **tls)
    if nkey:
        return NatsNKey.from_file(nkey, **tls)
    if s.nats_user:
        return NatsUserPassword(s.nats_user, s.nats_password or "", **tls)
    if tls:
        return NatsSecurity(**tls)
    return None


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
