"""Rounds of phases against the relay and Headgate, the soak, and the report.

One round is five phases, each driven by the same generator:

| phase           | system   | load                         | gives |
|-----------------|----------|------------------------------|-------|
| relay_max       | relay    | the mix, full speed, window  | baseline throughput |
| reads_max       | Headgate | reads only, full speed       | read pass-through throughput |
| mix_max         | Headgate | the mix, full speed          | sustained throughput, CPU/1000 |
| relay_rate      | relay    | the mix at --rate            | baseline latency |
| mix_rate        | Headgate | the mix at --rate            | read / approved / denied latency |

The summary is the median over rounds of every figure, and Headgate's figures as ratios to
the relay's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from time import perf_counter
from typing import Any, Protocol

import nats
from nats.aio.client import Client as NATS

from workflow.bench.floor import commit_floor
from workflow.bench.load import (
    READS_ONLY,
    TAG_PREFIX,
    BotApprover,
    ExecutionReports,
    Load,
    Mix,
    Observer,
    Tracker,
    drive,
    settle,
)
from workflow.bench.procs import (
    Child,
    Usage,
    start_relay,
    start_service,
    stop_all,
    usage,
    wait_relay_ready,
    wait_service_ready,
)
from workflow.bench.relay import delete_relay_streams
from workflow.bench.stats import median_of, median_summary, ratio, summarize
from workflow.service.embedded import EmbeddedNats, find_nats_server
from workflow.service.streams import stream_configs
from workflow.signing import ApproverKey
from workflow.subjects import Subjects


class Reporter(Protocol):
    def phase(self, name: str, total: int | None) -> None: ...
    def progress(self, completed: int, published: int) -> None: ...
    def done(self) -> None: ...
    def say(self, text: str) -> None: ...


class Quiet:
    def phase(self, name: str, total: int | None) -> None:
        pass

    def progress(self, completed: int, published: int) -> None:
        pass

    def done(self) -> None:
        pass

    def say(self, text: str) -> None:
        pass


@dataclass
class BenchConfig:
    nats_url: str | None = None
    rounds: int = 3
    duration: float = 5.0
    count: int | None = None
    rate: float | None = None  # None: half of the round's measured Headgate max on the mix
    mix: Mix = field(default_factory=Mix)
    window: int = 2000
    think: float = 0.0
    soak_minutes: float | None = None
    soak_share: float = 0.5  # the soak's rate: this share of the max it measures first
    warmup: int = 500
    database_url: str | None = None
    policy: Path | None = None
    approver_key: Path | None = None
    batch: int = 256
    keep: bool = False
    intake_processes: int = 1
    #: Seconds the service keeps decided proposals (`[retention] proposals`); None: its
    #: default policy.
    retention: int | None = None
    #: Report every released call as executed, as a hook does after it ran.
    executions: bool = False


@dataclass
class Rig:
    """Everything one benchmark run has started."""

    url: str
    tmp: Path
    subjects: Subjects
    relay_prefix: str
    service: Child
    relay: Child
    nc: NATS
    obs_nc: NATS
    observer: Observer
    bot: BotApprover
    embedded: EmbeddedNats | None
    tag: str
    phase_no: int = 0
    database_url: str | None = None

    async def database_mb(self) -> float | None:
        """The size of the service's database now: SQLite's file with its write-ahead log,
        or PostgreSQL's `pg_database_size`."""
        url = self.database_url
        if url is None:
            base = self.tmp / "service" / "headgate.db"
            files = [base, base.with_name(base.name + "-wal")]
            return round(sum(f.stat().st_size for f in files if f.exists()) / 2**20, 1)
        if url.startswith("postgresql"):
            import asyncpg

            try:
                conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql", 1))
            except Exception:
                return None
            try:
                size = await conn.fetchval("SELECT pg_database_size(current_database())")
            finally:
                await conn.close()
            return round(int(size) / 2**20, 1)
        return None

    async def reports_waiting(self) -> int | None:
        """Execution reports stored and not yet recorded by the service (its work queue's
        messages), or None when it cannot be read."""
        try:
            info = await self.nc.jetstream().stream_info(self.subjects.stream("executed"))
        except Exception:
            return None
        return int(info.state.messages)

    def nats_usage(self) -> Usage:
        if self.embedded is None or self.embedded.process is None:
            return Usage(None, None, None)
        return usage(self.embedded.pid)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _per_1000(cpu: float | None, n: int) -> float | None:
    return round(cpu / n * 1000, 4) if cpu is not None and n else None


async def run_phase(
    rig: Rig, name: str, *, relay: bool, mix: Mix, rate: float | None, config: BenchConfig,
    reporter: Reporter, count: int | None = None, duration: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    rig.phase_no += 1
    tracker = Tracker(relay=relay, think=config.think)
    rig.observer.tracker = tracker
    subject_for: Callable[[str], str] = (
        (lambda agent: f"{rig.relay_prefix}.in.{agent}") if relay else rig.subjects.proposals
    )
    count = count if count is not None else config.count
    duration = duration if duration is not None else config.duration
    load = Load(
        subject_for=subject_for, mix=mix, count=count, duration=duration, rate=rate,
        window=config.window, tag=f"{rig.tag}p{rig.phase_no}", seed=rig.phase_no,
    )  # fmt: skip
    child = rig.relay if relay else rig.service
    total = count if count is not None else (int(rate * duration) if rate else None)
    reporter.phase(name, total)

    def tick() -> None:
        reporter.progress(tracker.completed, tracker.published)

    before, nats_before = child.usage(), rig.nats_usage()
    await drive(rig.nc.jetstream(), load, tracker, tick)
    await settle(tracker, tick)
    after, nats_after = child.usage(), rig.nats_usage()
    reporter.done()
    rig.observer.tracker = None
    child.check_alive()
    elapsed = (
        (tracker.last_done - tracker.first_pub)
        if tracker.last_done is not None and tracker.first_pub is not None
        else None
    )
    cpu = _delta(before.cpu, after.cpu)
    return {
        "phase": name,
        "system": "relay" if relay else "headgate",
        "mix": mix.label(),
        "offered_rate": rate,
        "published": tracker.published,
        "completed": tracker.completed,
        "lost": len(tracker.pending),
        "unexpected": tracker.unexpected,
        "publish_errors": tracker.publish_errors,
        "seconds": round(elapsed, 3) if elapsed else None,
        "throughput": round(tracker.completed / elapsed, 1) if elapsed else None,
        "latency_ms": {k: summarize(v) for k, v in sorted(tracker.samples.items())},
        "cpu_s": round(cpu, 3) if cpu is not None else None,
        "cpu_s_per_1000": _per_1000(cpu, tracker.completed),
        "nats_cpu_s_per_1000": _per_1000(
            _delta(nats_before.cpu, nats_after.cpu), tracker.completed
        ),
        "rss_mb": after.rss_mb,
        "peak_rss_mb": after.peak_rss_mb,
    }


async def start_rig(config: BenchConfig, reporter: Reporter) -> Rig:
    tmp = Path(tempfile.mkdtemp(prefix="headgate-bench-"))
    run = uuid.uuid4().hex[:6]
    subjects = Subjects(f"hgbench{run}")
    relay_prefix = f"hgbrelay{run}"
    embedded: EmbeddedNats | None = None
    children: list[Child] = []
    try:
        if config.nats_url:
            url = config.nats_url
        else:
            embedded = EmbeddedNats(store_dir=tmp / "nats")
            url = embedded.start()  # on the main thread: the server dies with it
            reporter.say(f"nats-server with JetStream on {url} (store {tmp / 'nats'})")
        data_dir = tmp / "service"
        policy, approver_key = config.policy, config.approver_key
        if config.retention is not None:
            policy, approver_key = retention_policy(tmp, config.retention)
        service = start_service(
            url, data_dir, subjects.prefix, database_url=config.database_url,
            policy=policy, intake_processes=config.intake_processes,
        )  # fmt: skip
        children.append(service)
        relay = start_relay(url, tmp, relay_prefix, config.batch)
        children.append(relay)
        nc = await nats.connect(url, name="headgate-bench", max_reconnect_attempts=3)
        obs_nc = await nats.connect(url, name="headgate-bench-observer", max_reconnect_attempts=3)
        await wait_service_ready(nc, service, subjects.api("pending"), 60.0)
        await wait_relay_ready(relay, 30.0)
        key_path = approver_key or data_dir / "approver.seed"
        key = ApproverKey.from_file(key_path)
        bot = BotApprover(nc.jetstream(), subjects, key, config.think)
        observer = Observer(subjects, relay_prefix)
        observer.bot = bot
        bot.on_sent = observer.decided
        if config.executions:
            observer.executions = ExecutionReports(nc.jetstream(), subjects)
        await observer.subscribe(obs_nc)
        await obs_nc.flush()
        reporter.say(f"service pid {service.pid} (prefix {subjects.prefix}), relay pid {relay.pid}")
        return Rig(url, tmp, subjects, relay_prefix, service, relay, nc, obs_nc, observer, bot,
                   embedded, tag=f"{TAG_PREFIX}{run}",
                   database_url=config.database_url)  # fmt: skip
    except BaseException:
        stop_all(children)
        if embedded is not None:
            embedded.stop()
        if not config.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


async def stop_rig(rig: Rig, config: BenchConfig) -> None:
    if config.nats_url:  # a server of the user's: remove what the benchmark created
        js = rig.nc.jetstream()
        for cfg in stream_configs(rig.subjects):
            with contextlib.suppress(Exception):
                await js.delete_stream(cfg.name)  # type: ignore[arg-type]
        await delete_relay_streams(js, rig.relay_prefix)
    for nc in (rig.nc, rig.obs_nc):
        with contextlib.suppress(Exception):
            await nc.drain()
    stop_all([rig.service, rig.relay])
    if rig.embedded is not None:
        rig.embedded.stop()
    if not config.keep:
        shutil.rmtree(rig.tmp, ignore_errors=True)


async def warm_up(rig: Rig, config: BenchConfig, reporter: Reporter) -> None:
    if config.warmup <= 0:
        return
    for relay in (True, False):
        await run_phase(rig, "warmup " + ("relay" if relay else "headgate"), relay=relay,
                        mix=config.mix, rate=None, config=config, reporter=reporter,
                        count=config.warmup)  # fmt: skip


async def one_round(rig: Rig, config: BenchConfig, reporter: Reporter, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"round": n}
    plan: list[tuple[str, bool, Mix, bool]] = [
        ("relay_max", True, config.mix, False),
        ("reads_max", False, READS_ONLY, False),
        ("mix_max", False, config.mix, False),
        ("relay_rate", True, config.mix, True),
        ("mix_rate", False, config.mix, True),
    ]
    for name, relay, mix, paced in plan:
        rate = None
        if paced:
            rate = config.rate or max(1.0, round((out["mix_max"]["throughput"] or 2.0) / 2))
        out[name] = await run_phase(
            rig, f"round {n} {name}", relay=relay, mix=mix, rate=rate, config=config,
            reporter=reporter,
        )  # fmt: skip
        if name == "relay_rate" and (rig.database_url or "").startswith("postgresql"):
            # Beside the relay's latency: one durable commit on the same server, now.
            reporter.phase(f"round {n} commit_floor", None)
            out["commit_floor_ms"] = await commit_floor(rig.database_url or "")
            reporter.done()
    return out


def _lat(phase: dict[str, Any], kind: str) -> dict[str, Any] | None:
    got = phase["latency_ms"].get(kind)
    return got if isinstance(got, dict) else None


#: The read p50's target, as a multiple of the relay's: on SQLite at half the mix's maximum
#: (the rate the latency phases take by default), on PostgreSQL at 500/s.
READ_P50_TARGET = {"sqlite": (2.0, None), "postgresql": (3.0, 500.0)}


def read_p50_target(database: str, rate: float | None, config_rate: float | None) -> float | None:
    """The read p50 target that applies to this run's latency phase, or None when it was
    measured at another rate than its target's."""
    limit, at = READ_P50_TARGET[database]
    if at is None:
        return limit if config_rate is None else None
    return limit if rate is not None and abs(rate - at) < 0.5 else None


def summarize_rounds(
    rounds: list[dict[str, Any]], rig_usage: Usage, *, database: str = "sqlite",
    config_rate: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    def med(phase: str, key: str) -> float | None:
        return median_of([r[phase][key] for r in rounds])

    def lat(phase: str, kind: str) -> dict[str, float] | None:
        return median_summary([_lat(r[phase], kind) for r in rounds])

    rate = median_of([r["mix_rate"]["offered_rate"] for r in rounds])
    relay_tp, read_tp, mix_tp = med("relay_max", "throughput"), med("reads_max", "throughput"), \
        med("mix_max", "throughput")  # fmt: skip
    relay_lat, read_lat = lat("relay_rate", "relay"), lat("mix_rate", "read")
    relay_p50 = relay_lat.get("p50") if relay_lat else None
    read_p50 = read_lat.get("p50") if read_lat else None
    tp_ratio = ratio(read_tp, relay_tp)
    p50_ratio = ratio(read_p50, relay_p50)
    # PostgreSQL: the read p50 against the relay's plus one durable commit's (its floor).
    floor = median_summary([r.get("commit_floor_ms") for r in rounds])
    floor_p50 = floor.get("p50") if floor else None
    floor_ratio = (
        ratio(read_p50, relay_p50 + floor_p50)
        if relay_p50 is not None and floor_p50 is not None
        else None
    )
    # At the mix's maximum: an approval against the reads of the same phase (median of the
    # rounds' own ratios).
    approved_ratio = median_of(
        [
            ratio(
                (_lat(r["mix_max"], "approved") or {}).get("p50"),
                (_lat(r["mix_max"], "read") or {}).get("p50"),
            )
            for r in rounds
        ]
    )
    p50_target = read_p50_target(database, rate, config_rate)
    return {
        "offered_rate": rate,
        "relay": {
            "throughput": relay_tp,
            "latency_ms": relay_lat,
            "latency_ms_at_max": lat("relay_max", "relay"),
            "cpu_s_per_1000": med("relay_max", "cpu_s_per_1000"),
            "nats_cpu_s_per_1000": med("relay_max", "nats_cpu_s_per_1000"),
            "peak_rss_mb": max((r["relay_max"]["peak_rss_mb"] or 0) for r in rounds) or None,
            "commit_floor_ms": floor,
        },
        "headgate": {
            "read_throughput": read_tp,
            "mix_throughput": mix_tp,
            "read_latency_ms": read_lat,
            "approved_latency_ms": lat("mix_rate", "approved"),
            "approved_from_inbox_latency_ms": lat("mix_rate", "approved_from_inbox"),
            "read_latency_ms_at_mix_max": lat("mix_max", "read"),
            "approved_latency_ms_at_mix_max": lat("mix_max", "approved"),
            "held_latency_ms": lat("mix_rate", "held"),
            "denied_latency_ms": lat("mix_rate", "denied"),
            "read_latency_ms_at_max": lat("reads_max", "read"),
            "cpu_s_per_1000": med("mix_max", "cpu_s_per_1000"),
            "read_cpu_s_per_1000": med("reads_max", "cpu_s_per_1000"),
            "nats_cpu_s_per_1000": med("mix_max", "nats_cpu_s_per_1000"),
            "peak_rss_mb": rig_usage.peak_rss_mb,
            "lost": sum(r[p]["lost"] for r in rounds for p in ("reads_max", "mix_max", "mix_rate")),
            "unexpected": sum(
                r[p]["unexpected"] for r in rounds for p in ("reads_max", "mix_max", "mix_rate")
            ),
        },
        "ratios": {
            "read_throughput": tp_ratio,
            "mix_throughput": ratio(mix_tp, relay_tp),
            "read_p50": p50_ratio,
            "read_p50_to_relay_p50_plus_commit": floor_ratio,
            "approved_p50_to_read_p50_at_mix_max": approved_ratio,
            "read_p99": ratio(
                read_lat.get("p99") if read_lat else None,
                relay_lat.get("p99") if relay_lat else None,
            ),
        },
        "targets": {
            "read_throughput_at_least_half_of_relay": None if tp_ratio is None else tp_ratio >= 0.5,
            # The multiple (2 on SQLite at half the mix maximum, 3 on PostgreSQL at 500/s);
            # None when the latency phase ran at another rate.
            "read_p50_target": p50_target,
            "read_p50_within_target": None
            if p50_ratio is None or p50_target is None
            else p50_ratio <= p50_target,
            "approved_p50_at_most_twice_read_p50_at_mix_max": None
            if approved_ratio is None
            else approved_ratio <= 2.0,
        },
    }


async def soak(rig: Rig, config: BenchConfig, reporter: Reporter) -> dict[str, Any]:
    """Measure Headgate's max throughput on the mix, then run at `soak_share` of it (half by
    default; or at `--rate`), minute by minute."""
    assert config.soak_minutes is not None
    probe = await run_phase(rig, "soak: max throughput", relay=False, mix=config.mix, rate=None,
                            config=config, reporter=reporter)  # fmt: skip
    max_tp = float(probe["throughput"] or 0)
    rate = config.rate or max(1.0, max_tp * config.soak_share)
    minutes: list[dict[str, Any]] = []
    seconds = config.soak_minutes * 60
    rig.phase_no += 1
    tracker = Tracker(relay=False, think=config.think)
    rig.observer.tracker = tracker
    load = Load(subject_for=rig.subjects.proposals, mix=config.mix, count=None, duration=seconds,
                rate=rate, window=config.window, tag=f"{rig.tag}s{rig.phase_no}",
                seed=rig.phase_no)  # fmt: skip
    share = (
        "half"
        if config.rate is None and config.soak_share == 0.5
        else f"{rate / max(max_tp, 1.0):.2f} × the max"
    )
    reporter.say(f"soak: {config.soak_minutes:g} min at {rate:.0f}/s ({share} of {max_tp:.0f}/s)")
    reporter.phase("soak", int(rate * seconds))
    cpu0 = rig.service.usage().cpu

    last_cpu = cpu0
    start = perf_counter()

    async def sample(minute: int, seconds: float) -> None:
        """Close the window of `minute` (`seconds` long): its figures become a row."""
        nonlocal last_cpu
        samples, completed = tracker.take_window()
        use = rig.service.usage()
        row: dict[str, Any] = {
            "minute": minute,
            "seconds": round(seconds, 1),
            "completed": completed,
            "throughput": round(completed / max(seconds, 1e-3), 1),
            "read_ms": summarize(samples.get("read", [])),
            "approved_ms": summarize(samples.get("approved", [])),
            "rss_mb": use.rss_mb,
            "database_mb": await rig.database_mb(),
            "cpu_s_per_1000": _per_1000(_delta(last_cpu, use.cpu), completed),
            "outstanding": len(tracker.pending),
        }
        if config.executions:
            row["reports_waiting"] = await rig.reports_waiting()
        last_cpu = use.cpu
        minutes.append(row)
        read = row["read_ms"] or {}
        appr = row["approved_ms"] or {}
        reporter.say(
            f"minute {minute:>3}: {row['throughput']:>8}/s  read p50 {read.get('p50')} ms "
            f"p99 {read.get('p99')} ms  approved p50 {appr.get('p50')} ms  "
            f"RSS {use.rss_mb} MB  database {row['database_mb']} MB  "
            f"CPU/1000 {row['cpu_s_per_1000']} s"
            + (f"  reports waiting {row['reports_waiting']}" if config.executions else "")
            + ("" if seconds >= 59.5 else f"  (over {seconds:.0f} s)")
        )

    async def sample_minutes() -> None:
        minute = 0
        while True:
            minute += 1
            await asyncio.sleep(max(0.0, start + 60 * minute - perf_counter()))
            await sample(minute, 60.0)

    sampler = asyncio.create_task(sample_minutes())

    def tick() -> None:
        reporter.progress(tracker.completed, tracker.published)

    try:
        await drive(rig.nc.jetstream(), load, tracker, tick)
        await settle(tracker, tick)
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        reporter.done()
        rig.observer.tracker = None
    # What completed after the last full minute is a row of its own when it is a soak's only
    # one or a stretch worth reading (--soak 2.5); the few seconds of a whole-minute soak's
    # settling are not: that row would stand for the soak's last minute in the verdict.
    rest = perf_counter() - start - 60 * len(minutes)
    if tracker.window_completed and (not minutes or rest >= 10.0):
        await sample(len(minutes) + 1, rest)
    full = [m for m in minutes if m["read_ms"] and (m["seconds"] >= 59.5 or len(minutes) == 1)]
    verdict: dict[str, Any] = {}
    if len(full) >= 2:
        first, last = full[0], full[-1]
        verdict = {
            "read_p50_first_ms": first["read_ms"]["p50"],
            "read_p50_last_ms": last["read_ms"]["p50"],
            "read_p99_first_ms": first["read_ms"]["p99"],
            "read_p99_last_ms": last["read_ms"]["p99"],
            "rss_first_mb": first["rss_mb"], "rss_last_mb": last["rss_mb"],
            "read_p50_drift": ratio(last["read_ms"]["p50"], first["read_ms"]["p50"]),
            "rss_growth_mb": round(last["rss_mb"] - first["rss_mb"], 1)
            if last["rss_mb"] is not None and first["rss_mb"] is not None else None,
            "database_mb_last": last["database_mb"],
            "database_mb_max": max((m["database_mb"] or 0) for m in full) or None,
            **p99_windows(full),
        }  # fmt: skip
    return {
        "max_throughput": max_tp,
        "rate": round(rate, 1),
        "minutes": minutes,
        "published": tracker.published,
        "completed": tracker.completed,
        "lost": len(tracker.pending),
        "unexpected": tracker.unexpected,
        "verdict": verdict,
    }


def p99_windows(minutes: list[dict[str, Any]]) -> dict[str, Any]:
    """The read p99 early in a soak against the p99 at its end: the median of the per-minute
    p99s of minutes 2–11 and of the last 10 minutes (on a soak shorter than 21 minutes, of
    two windows as long as fit after the first minute without overlapping)."""
    width = min(10, (len(minutes) - 1) // 2)
    if width < 1:
        return {}
    early = [m["read_ms"]["p99"] for m in minutes[1 : 1 + width]]
    late = [m["read_ms"]["p99"] for m in minutes[-width:]]
    first, last = median_of(early), median_of(late)
    return {
        "p99_window_minutes": width,
        "read_p99_early_ms": first,
        "read_p99_late_ms": last,
        "read_p99_late_to_early": ratio(last, first),
    }


def retention_policy(tmp: Path, seconds: int) -> tuple[Path, Path]:
    """A policy like the default one, keeping decided proposals and audit records `seconds`
    (the pruned audit archived in the temporary directory; the pruner runs every 10 s), with
    an approver key of its own for the bot; returns both files."""
    key = ApproverKey.generate()
    key_path = tmp / "bench-approver.seed"
    key.write(key_path)
    policy = tmp / "bench-policy.toml"
    policy.write_text(
        f"""[retention]
proposals = {seconds}
audit = {seconds}
audit_archive = "{tmp / "audit-archive"}"
interval = 10

[approvers.bench]
key = "{key.public_key}"
roles = ["admin", "approver"]
workspaces = ["*"]
"""
    )
    return policy, key_path


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(), "processor": platform.processor() or None,
    }  # fmt: skip
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["processor"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(Exception):
        out = subprocess.run([find_nats_server(), "--version"], capture_output=True, text=True,
                             timeout=5)  # fmt: skip
        info["nats_server"] = out.stdout.strip()
    return info


async def run_bench(config: BenchConfig, reporter: Reporter | None = None) -> dict[str, Any]:
    reporter = reporter or Quiet()
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {
            "rounds": config.rounds,
            "duration_s": config.duration,
            "count": config.count,
            "rate": config.rate,
            "mix": config.mix.label(),
            "window": config.window,
            "think_s": config.think,
            "database": "postgresql"
            if config.database_url and config.database_url.startswith("postgresql")
            else "sqlite",
            "nats": "external" if config.nats_url else "embedded",
            "warmup": config.warmup,
            "intake_processes": config.intake_processes,
            "retention_s": config.retention,
            "executions": config.executions,
        },
    }
    # Nothing between starting the rig and the `try` that stops it: a Ctrl-C (or SIGTERM)
    # there would leave the service and the relay running.
    rig = await start_rig(config, reporter)
    if config.keep:
        result["kept"] = str(rig.tmp)
    try:
        await warm_up(rig, config, reporter)
        if config.soak_minutes is not None:
            result["soak"] = await soak(rig, config, reporter)
        else:
            rounds = [await one_round(rig, config, reporter, n + 1) for n in range(config.rounds)]
            result["rounds"] = rounds
            database = result["config"]["database"]
            result["summary"] = summarize_rounds(
                rounds, rig.service.usage(), database=database, config_rate=config.rate
            )
        result["service_peak_rss_mb"] = rig.service.usage().peak_rss_mb
        result["bot"] = {"decisions_sent": rig.bot.sent, "errors": rig.bot.errors}
        if rig.observer.executions is not None:
            reports = rig.observer.executions
            result["executions"] = {"reports_sent": reports.sent, "errors": reports.errors}
    finally:
        await stop_rig(rig, config)
    return result
