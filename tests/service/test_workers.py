"""Intake worker processes (`serve --intake-processes N`): real processes on a real server."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.service.helpers import propose, running_service, wait_until
from tests.service.test_security import policy_text
from workflow.errors import ConfigError
from workflow.service.lifecycle import Service
from workflow.service.settings import Settings
from workflow.service.streams import service_consumers
from workflow.service.workers import IntakeWorkers

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill 0: only count processes that have not exited.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def _released_once(h: object, pids: list[str], timeout: float = 30) -> None:
    observer = h.observer  # type: ignore[attr-defined]
    await wait_until(
        lambda: asyncio.sleep(0, [p for p in pids if observer.of("released", p)]),
        lambda done: len(done) == len(pids),
        timeout=timeout,
    )
    counts = Counter(b["proposal_id"] for b in observer.of("released") if b["proposal_id"] in pids)
    assert set(counts.values()) == {1}


async def test_workers_share_the_intake_and_a_killed_one_is_replaced(
    nats_url: str, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("workflow.service.workers.RESTART_BACKOFF", 0.5)
    async with running_service(
        nats_url, tmp_path, database_url=database_url, intake_processes=3
    ) as h:
        workers = h.service.workers
        assert workers is not None
        first = workers.pids
        assert len(first) == 2
        assert all(_alive(p) for p in first)
        # The main process's own intake stops: from here on only the workers can release.
        main_intake = h.service.supervisor.tasks["intake"].task
        assert main_intake is not None
        main_intake.cancel()
        await asyncio.gather(main_intake, return_exceptions=True)
        pids = [
            await propose(h.nc, h.subjects, tool="read_file", arguments={"path": f"f{i}"})
            for i in range(150)
        ]
        await _released_once(h, pids)

        os.kill(first[0], signal.SIGKILL)
        await wait_until(lambda: asyncio.sleep(0, workers.pids), lambda now: now != first, 10)
        replaced = workers.pids
        assert first[0] not in replaced
        assert first[1] in replaced
        more = [
            await propose(h.nc, h.subjects, tool="read_file", arguments={"path": f"g{i}"})
            for i in range(100)
        ]
        # The server may still hand a message to a pull request of the killed worker: it comes
        # back after the ack wait (`ACK_WAIT`), to a live process.
        await _released_once(h, more, timeout=60)
        assert h.service.ctx is not None
        assert (await h.service.ctx.store.audit.verify()).ok
    # Stopping the service stops its workers.
    assert not any(_alive(p) for p in replaced)


async def test_a_worker_runs_the_intake_only(nats_url: str, tmp_path: Path) -> None:
    main = Service(Settings(data_dir=tmp_path, nats_url=nats_url, prefix="hgworkeronly"))
    await main.start()  # the streams and the schema, as the main process makes them
    worker = Service(
        Settings(data_dir=tmp_path, nats_url=nats_url, prefix="hgworkeronly", intake_worker=True)
    )
    try:
        await worker.start()  # the data dir is the main process's: a worker does not lock it
        assert [s.spec.durable for s in worker.stages] == [main.stages[0].spec.durable]
        assert worker.broker is None
        assert worker.workers is None
    finally:
        await worker.stop()
        await main.stop()


async def test_several_intake_processes_need_a_shared_database(tmp_path: Path) -> None:
    service = Service(
        Settings(data_dir=tmp_path, database_url="sqlite+aiosqlite:///:memory:", intake_processes=2)
    )
    with pytest.raises(ConfigError, match="in-memory"):
        await service.start()


async def test_a_worker_needs_the_main_process_nats_url(tmp_path: Path) -> None:
    worker = Service(Settings(data_dir=tmp_path, intake_worker=True))
    with pytest.raises(ConfigError, match="--nats-url"):
        await worker.start()


async def test_stopping_kills_a_worker_that_does_not_stop(tmp_path: Path) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    workers = IntakeWorkers([["python3", "-c", stubborn]], poll=0.05)
    workers.start()
    (pid,) = workers.pids
    await asyncio.sleep(0.3)
    await workers.stop(timeout=0.5)
    assert not _alive(pid)


async def test_sighup_reloads_the_policy_in_the_workers_too(nats_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(policy_text())
    async with running_service(nats_url, tmp_path, policy_path=path, intake_processes=2) as h:
        ctx = h.service.ctx
        assert ctx is not None

        async def reloads() -> int:
            rows = await ctx.store.audit.rows()
            return sum(1 for r in rows if r.kind == "policy.reload" and "SIGHUP" in r.data)

        # Both processes pull (the worker installs its signal handlers before it does so).
        js = h.nc.jetstream()
        intake = service_consumers(h.subjects)["intake"]

        async def pulling() -> int:
            info = await js.consumer_info(intake.stream, intake.durable)
            return info.num_waiting or 0

        await wait_until(pulling, lambda n: n >= 2, timeout=60)
        h.service._on_sighup()
        await wait_until(reloads, lambda n: n == 2, timeout=60)  # this process and the worker


async def test_a_sighup_before_the_worker_has_its_handler_does_not_kill_it() -> None:
    workers = IntakeWorkers([["python3", "-c", "import time; time.sleep(30)"]], poll=0.05)
    workers.start()
    (pid,) = workers.pids
    workers.signal(signal.SIGHUP)  # at once: the child has installed no handler of its own
    await asyncio.sleep(0.5)
    assert _alive(pid)
    assert workers.pids == [pid]  # not restarted either
    await workers.stop(timeout=2)
    assert not _alive(pid)


async def test_the_main_process_takes_proposals_only_when_no_worker_can(
    nats_url: str, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker, once killed, is not replaced during the test.
    monkeypatch.setattr("workflow.service.workers.RESTART_BACKOFF", 600)
    async with running_service(
        nats_url, tmp_path, database_url=database_url, intake_processes=2
    ) as h:
        js = h.nc.jetstream()
        intake = service_consumers(h.subjects)["intake"]
        info = await js.consumer_info(intake.stream, intake.durable)
        assert info.num_waiting is not None

        async def pulling() -> int:
            return (await js.consumer_info(intake.stream, intake.durable)).num_waiting or 0

        await wait_until(pulling, lambda n: n >= 2, timeout=60)  # the worker's request is out
        main_intake = h.service.stages[0]
        assert main_intake.spec.durable == "intake"
        pids = [
            await propose(h.nc, h.subjects, tool="read_file", arguments={"path": f"f{i}"})
            for i in range(60)
        ]
        await _released_once(h, pids)
        # The worker's pull requests always had room: the main process was handed none.
        assert main_intake.processed == 0

        workers = h.service.workers
        assert workers is not None
        (worker,) = workers.pids
        os.kill(worker, signal.SIGKILL)
        await wait_until(lambda: asyncio.sleep(0, _alive(worker)), lambda alive: not alive, 10)
        more = [
            await propose(h.nc, h.subjects, tool="read_file", arguments={"path": f"g{i}"})
            for i in range(40)
        ]
        # With no worker left, the main process takes them all.
        await _released_once(h, more, timeout=60)
        assert main_intake.processed == len(more)
