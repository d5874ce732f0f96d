"""`headgate bench`: Headgate against a bare JetStream relay, on the same server, same run."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from workflow.cli.common import JsonOut, console, err_console, print_json

if TYPE_CHECKING:
    from rich.progress import TaskID
    from rich.table import Table


class RichReporter:
    """A progress bar per phase, on stderr (stdout stays clean for --json)."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
            console=err_console, refresh_per_second=4, transient=True,
        )  # fmt: skip
        self.task: TaskID | None = None

    def phase(self, name: str, total: int | None) -> None:
        self.bar.start()
        self.task = self.bar.add_task(name, total=total, rate="")

    def progress(self, completed: int, published: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, completed=completed, rate=f"sent {published}")

    def done(self) -> None:
        if self.task is not None:
            self.bar.remove_task(self.task)
            self.task = None
        self.bar.stop()

    def say(self, text: str) -> None:
        err_console.print(text, highlight=False)


def bench(
    nats_url: Annotated[
        str | None,
        typer.Option("--nats-url", help="Benchmark on this NATS server (it gets a service and a "
                     "relay on prefixes of their own, removed afterwards). Default: start an "
                     "embedded nats-server in a temporary directory."),
    ] = None,
    rounds: Annotated[
        int, typer.Option("--rounds", min=1, help="Rounds; the figures are medians.")
    ] = 3,
    duration: Annotated[
        float, typer.Option("--duration", min=0.1, help="Seconds of load per phase.")
    ] = 5.0,
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, help="Proposals per phase (instead of --duration)."),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", min=1, help="Offered proposals/s of the latency phases and the "
                     "soak. Default: half of Headgate's throughput on the mix measured in the "
                     "same round."),
    ] = None,
    mix: Annotated[
        str, typer.Option("--mix", help="Percent reads,approvable writes,denied calls.")
    ] = "80,15,5",
    window: Annotated[
        int, typer.Option("--window", min=1, help="Proposals in flight at full speed.")
    ] = 2000,
    think: Annotated[
        float, typer.Option("--think", min=0, help="The bot approver's think time, seconds "
                            "(excluded from the approved latency).")
    ] = 0.0,
    soak: Annotated[
        float | None,
        typer.Option("--soak", metavar="MINUTES", min=0.1, help="Soak mode: measure the max "
                     "throughput, run at half of it (--soak-share) for MINUTES, print latency "
                     "and RSS per minute."),
    ] = None,
    soak_share: Annotated[
        float,
        typer.Option("--soak-share", min=0.01, max=1.0, help="The soak's rate as a share of "
                     "the max it measures first (--rate gives a rate instead)."),
    ] = 0.5,
    warmup: Annotated[
        int, typer.Option("--warmup", min=0, help="Proposals per system before measuring.")
    ] = 500,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="The service's database (default: SQLite in a "
                     "temporary directory)."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Policy file for the service.")
    ] = None,
    approver_key: Annotated[
        Path | None,
        typer.Option("--approver-key", help="Seed of the bot approver (needed with --policy; "
                     "default: the service's local approver key)."),
    ] = None,
    intake_processes: Annotated[
        int,
        typer.Option("--intake-processes", min=1, max=64, help="The service's intake "
                     "processes (serve --intake-processes); CPU and memory are summed over "
                     "them."),
    ] = 1,
    retention: Annotated[
        str | None,
        typer.Option("--retention", metavar="DURATION", help="Keep decided proposals and audit "
                     "records this long (e.g. 2m; the service's policy gets `[retention]`, "
                     "pruned every 10 s, the audit archived in the temporary directory): a "
                     "soak then shows the database staying bounded. Not with --policy."),
    ] = None,
    executions: Annotated[
        bool,
        typer.Option("--executions", help="Report every released call as executed, as a hook "
                     "does once the call ran (the service records each in a transaction of "
                     "its own): the load of real agents. The relay does nothing of the kind."),
    ] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the temporary directory.")] = False,
    json_out: JsonOut = False,
) -> None:  # fmt: skip
    """Measure Headgate against a bare JetStream relay on the same server, in the same run.

    Starts a nats-server (unless --nats-url), a `headgate serve` process and a bare nats-py
    relay process, and drives both with the same load generator: full speed for throughput,
    --rate for latency. Prints medians over --rounds and Headgate's figures as ratios to the
    relay's.
    """
    import asyncio

    from workflow.bench.load import Mix
    from workflow.bench.runner import BenchConfig, run_bench
    from workflow.cli.common import fail
    from workflow.policy.durations import parse_duration

    kept: int | None = None
    if retention is not None:
        if policy is not None:
            fail("--retention writes the service's policy itself: leave out --policy")
        try:
            kept = int(parse_duration(retention))
        except (ValueError, TypeError) as exc:
            fail(f"--retention: {exc}")
    config = BenchConfig(
        nats_url=nats_url, rounds=rounds, duration=duration, count=count, rate=rate,
        mix=Mix.parse(mix), window=window, think=think, soak_minutes=soak,
        soak_share=soak_share, warmup=warmup,
        database_url=database_url, policy=policy, approver_key=approver_key, keep=keep,
        intake_processes=intake_processes, retention=kept, executions=executions,
    )  # fmt: skip
    signal.signal(signal.SIGTERM, _stop_like_ctrl_c)  # stop the service and relay it started
    result = asyncio.run(run_bench(config, RichReporter()))
    if json_out:
        print_json(result)
    else:
        if "soak" in result:
            _print_soak(result)
        else:
            _print_summary(result)
        if "executions" in result:
            reports = result["executions"]
            console.print(
                f"execution reports sent {reports['reports_sent']} (errors {reports['errors']})"
            )
        if "kept" in result:
            console.print(f"kept {result['kept']} (the service's data dir is service/ in it)")


def _stop_like_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run unwinds, so the service, relay and nats-server it started
    are stopped and its temporary directory removed (the default action leaves them running)."""
    raise KeyboardInterrupt


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    else:
        text = str(value)
    return text + unit


def _lat_row(table: Table, name: str, lat: dict[str, Any] | None, note: str = "") -> None:
    lat = lat or {}
    table.add_row(name, *(_fmt(lat.get(k)) for k in ("p50", "p90", "p99", "max")), note)


def _print_summary(result: dict[str, Any]) -> None:
    from rich.table import Table

    s = result["summary"]
    relay, hg, ratios = s["relay"], s["headgate"], s["ratios"]
    cfg, m = result["config"], result["machine"]
    console.print(
        f"[bold]headgate bench[/] {result['date']}  {m.get('cpus')} CPUs  "
        f"{m.get('processor') or ''}  {m.get('nats_server') or ''}  database {cfg['database']}"
    )
    console.print(
        f"medians of {cfg['rounds']} rounds; mix {cfg['mix']}; latency at "
        f"{_fmt(s['offered_rate'])}/s offered, throughput at full speed"
    )
    tp = Table("throughput", "proposals/s", "× relay", "CPU s / 1000", "nats CPU s / 1000")
    tp.add_row("bare JetStream relay", _fmt(relay["throughput"]), "1",
               _fmt(relay["cpu_s_per_1000"]), _fmt(relay["nats_cpu_s_per_1000"]))  # fmt: skip
    tp.add_row("Headgate, reads only", _fmt(hg["read_throughput"]),
               _fmt(ratios["read_throughput"]), _fmt(hg["read_cpu_s_per_1000"]), "")  # fmt: skip
    tp.add_row("Headgate, the mix", _fmt(hg["mix_throughput"]), _fmt(ratios["mix_throughput"]),
               _fmt(hg["cpu_s_per_1000"]), _fmt(hg["nats_cpu_s_per_1000"]))  # fmt: skip
    console.print(tp)
    lat = Table("latency (ms)", "p50", "p90", "p99", "max", "from → to")
    _lat_row(lat, "bare JetStream relay", relay["latency_ms"], "publish → relayed")
    if relay.get("commit_floor_ms"):
        _lat_row(lat, "one durable commit", relay["commit_floor_ms"], "BEGIN → COMMIT (1 row)")
    _lat_row(lat, "Headgate read", hg["read_latency_ms"], "publish → released")
    _lat_row(lat, "Headgate approved", hg["approved_latency_ms"], "decision sent → released")
    _lat_row(lat, "Headgate held", hg["held_latency_ms"], "publish → inbox item")
    _lat_row(lat, "Headgate denied", hg["denied_latency_ms"], "publish → blocked")
    console.print(lat)
    targets = s["targets"]
    limit = targets.get("read_p50_target")
    target = (
        f"target ≤ {limit:g}: {_ok(targets['read_p50_within_target'])}"
        if limit is not None
        else "its target is at 500/s on PostgreSQL, at half the mix maximum on SQLite"
    )
    console.print(
        f"read p50 × relay: [bold]{_fmt(ratios['read_p50'])}[/] ({target}); "
        "read throughput × relay: "
        f"[bold]{_fmt(ratios['read_throughput'])}[/] (target ≥ 0.5: "
        f"{_ok(targets['read_throughput_at_least_half_of_relay'])})"
    )
    if ratios.get("read_p50_to_relay_p50_plus_commit") is not None:
        console.print(
            "read p50 × (relay p50 + one durable commit's p50): "
            f"[bold]{_fmt(ratios['read_p50_to_relay_p50_plus_commit'])}[/]"
        )
    at_max = hg.get("approved_latency_ms_at_mix_max") or {}
    console.print(
        f"at the mix's maximum: approved p50 {_fmt(at_max.get('p50'), ' ms')} = "
        f"[bold]{_fmt(ratios.get('approved_p50_to_read_p50_at_mix_max'))}[/] × the read p50 "
        f"(target ≤ 2: {_ok(targets.get('approved_p50_at_most_twice_read_p50_at_mix_max'))})"
    )
    console.print(
        f"service peak RSS {_fmt(result.get('service_peak_rss_mb'), ' MB')}, relay peak RSS "
        f"{_fmt(relay['peak_rss_mb'], ' MB')}; lost {hg['lost']}, unexpected outcomes "
        f"{hg['unexpected']}"
    )


def _ok(flag: bool | None) -> str:
    return "-" if flag is None else "[green]met[/]" if flag else "[red]missed[/]"


def _print_soak(result: dict[str, Any]) -> None:
    from rich.table import Table

    soak = result["soak"]
    console.print(
        f"[bold]soak[/] at {soak['rate']:g}/s "
        f"({soak['rate'] / max(soak['max_throughput'], 1.0):.2f} × the max of "
        f"{soak['max_throughput']:g}/s) {result['date']}"
    )
    table = Table("minute", "proposals/s", "read p50", "read p99", "approved p50", "RSS MB",
                  "database MB", "CPU s/1000", "in flight")  # fmt: skip
    for row in soak["minutes"]:
        read, appr = row["read_ms"] or {}, row["approved_ms"] or {}
        seconds = row.get("seconds", 60.0)
        minute = str(row["minute"]) if seconds >= 59.5 else f"{row['minute']} ({seconds:g} s)"
        table.add_row(minute, _fmt(row["throughput"]), _fmt(read.get("p50")),
                      _fmt(read.get("p99")), _fmt(appr.get("p50")), _fmt(row["rss_mb"]),
                      _fmt(row.get("database_mb")), _fmt(row["cpu_s_per_1000"]),
                      str(row["outstanding"]))  # fmt: skip
    console.print(table)
    v = soak["verdict"]
    if v:
        console.print(
            f"read p50 {v['read_p50_first_ms']} → {v['read_p50_last_ms']} ms "
            f"(× {v['read_p50_drift']}), RSS {v['rss_first_mb']} → {v['rss_last_mb']} MB "
            f"({v['rss_growth_mb']:+} MB); lost {soak['lost']}, unexpected {soak['unexpected']}"
        )
        if "read_p99_late_to_early" in v:
            width = v["p99_window_minutes"]
            console.print(
                f"read p99 of the last {width} minutes {_fmt(v['read_p99_late_ms'])} ms against "
                f"{_fmt(v['read_p99_early_ms'])} ms in minutes 2–{1 + width} "
                f"(× {_fmt(v['read_p99_late_to_early'])}); database "
                f"{_fmt(v.get('database_mb_max'), ' MB')} at most"
            )
