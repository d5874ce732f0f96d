"""The SQLite writer never checkpoints inside a commit; the WalCheckpointer keeps the WAL small."""

from __future__ import annotations

import asyncio
import sqlite3
import struct
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from tests.store.test_repo import NOW, record
from workflow.store.engine import WAL_SIZE_LIMIT, create_engine, sqlite_sync_writer
from workflow.store.repo import Store
from workflow.store.sqlite_writer import SqliteWriteLock, WalCheckpointer


def _writer(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
    return conn


def _round(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 4000,) for _ in range(50)])
    conn.execute("DELETE FROM t")
    conn.execute("COMMIT")


def _wal_size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def _wal_restarts(path: Path) -> int:
    """How many times the log has started over since its file was created: the checkpoint
    sequence number in the WAL header, which each restart increments."""
    with path.with_name(path.name + "-wal").open("rb") as wal:
        (sequence,) = struct.unpack(">I", wal.read(16)[12:16])
    return int(sequence)


async def _checkpointed(checkpointer: WalCheckpointer) -> None:
    """Wait for the checkpoint `committed()` started (however slow the machine is)."""
    task = checkpointer._task
    if task is not None:
        await asyncio.wait([task])


async def test_checkpoints_keep_the_wal_from_growing(tmp_path: Path) -> None:
    path = tmp_path / "hg.db"
    conn = _writer(path)
    checkpointer = WalCheckpointer(str(path), SqliteWriteLock(str(path)), interval=0.0)
    sizes = []
    for _ in range(20):
        _round(conn)
        checkpointer.committed()
        await _checkpointed(checkpointer)  # it runs in a worker thread
        sizes.append(_wal_size(path))
    await checkpointer.close()
    conn.close()
    one_round = sizes[0]
    assert max(sizes) < 4 * one_round, sizes  # the log is reused, not appended to forever


@pytest.mark.slow
async def test_between_commits_a_checkpoint_completes_without_the_write_lock(
    tmp_path: Path,
) -> None:
    # Another process holds the write lock throughout: a checkpoint that needed it would wait.
    # Nothing commits during these checkpoints, so each completes the log without the lock,
    # and the next commit starts the log over.
    path = tmp_path / "hg.db"
    holder = await _hold_in_another_process(path, 30.0)
    conn = _writer(path)
    checkpointer = WalCheckpointer(str(path), SqliteWriteLock(str(path)), interval=0.0)
    try:
        for _ in range(10):
            _round(conn)
            checkpointer.committed()
            await asyncio.wait_for(_checkpointed(checkpointer), 10)
        _round(conn)
        assert checkpointer.completed_unlocked == 10
        assert checkpointer.completed_locked == 0
        assert _wal_restarts(path) == 10
    finally:
        holder.kill()
        await holder.wait()
        await checkpointer.close()
        conn.close()


async def test_a_background_transaction_returns_once_a_checkpoint_has_copied_it(
    tmp_path: Path,
) -> None:
    # The pruner's transactions write megabytes to the log; each is checkpointed before the
    # pruner goes on, whatever the interval, so the next commit starts the log over. The
    # stages' commits wait for the interval (an hour here: no checkpoint).
    path = tmp_path / "hg.db"
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    assert store.db._checkpointer is not None
    store.db._checkpointer.interval = 3600.0
    await store.db.transact(lambda conn: conn.execute(text("CREATE TABLE bulk (x BLOB)")))

    def bulk(conn: Connection) -> None:
        conn.execute(text("INSERT INTO bulk VALUES (:x)"), [{"x": b"x" * 4000}] * 200)

    try:
        await store.db.transact(bulk)
        await store.db.transact(bulk)  # a stage's commits: the log only grows
        assert _wal_restarts(path) == 0
        await store.db.transact(bulk, background=True)
        await store.db.transact(bulk)
        assert _wal_restarts(path) == 1
    finally:
        await store.close()


async def test_without_checkpoints_the_wal_grows(tmp_path: Path) -> None:
    # The control for the test above: with automatic checkpoints off, nothing else shrinks it.
    path = tmp_path / "hg.db"
    conn = _writer(path)
    sizes = []
    for _ in range(20):
        _round(conn)
        sizes.append(_wal_size(path))
    conn.close()
    assert sizes[-1] > 10 * sizes[0]


async def test_checkpoints_are_spaced_by_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "hg.db"
    conn = _writer(path)
    checkpointer = WalCheckpointer(str(path), SqliteWriteLock(str(path)), interval=3600.0)
    for _ in range(5):
        _round(conn)
        checkpointer.committed()  # the last checkpoint is "recent": none starts
    await checkpointer.close()
    assert _wal_size(path) > 4 * 50 * 4000
    conn.close()


async def test_the_service_writer_does_not_checkpoint_in_its_commits(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/hg.db")
    writer = sqlite_sync_writer(engine)
    assert writer is not None
    with writer.connect() as conn:
        assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == 0
        assert conn.execute(text("PRAGMA journal_size_limit")).scalar() == WAL_SIZE_LIMIT
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    writer.dispose()
    await engine.dispose()


async def _write_back_to_back(store: Store, commits: int, name: str = "p") -> None:
    """Commit one proposal after another, as a busy intake does."""
    for n in range(commits):
        await store.proposals.record([record(f"{name}{n}")], NOW)
        await asyncio.sleep(0)  # the service's loop turns between batches (NATS I/O)


async def _wal_after_back_to_back(path: Path, interval: float) -> tuple[int, int]:
    """The log's size and restarts after 800 commits back to back with the checkpointer at
    `interval` (measured before closing: the last connection to close checkpoints)."""
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    assert store.db._checkpointer is not None
    store.db._checkpointer.interval = interval
    try:
        await _write_back_to_back(store, 800)
        return _wal_size(path), _wal_restarts(path)
    finally:
        await store.close()


@pytest.mark.slow
async def test_the_wal_starts_over_while_commits_keep_coming(tmp_path: Path) -> None:
    # A checkpoint that runs while commits keep landing never finishes copying the log, and
    # an unfinished log is never started over: it grows without end. The checkpointer holds
    # the write lock for its last pass, so the log starts over again and again. The control,
    # the same commits with no checkpoint, is measured in the same run (≈ 50 KB a commit).
    # The log's size is its largest stretch between two restarts: the commits that land
    # while one checkpoint copies and syncs, so it depends on the disk (about 1 MB on an
    # idle machine, 4-8 × that beside other work, more when one sync stalls), never on the
    # count; the restarts are what tells a log that is reused from one that grows.
    checkpointed, restarts = await _wal_after_back_to_back(tmp_path / "hg.db", 0.0)
    control, control_restarts = await _wal_after_back_to_back(tmp_path / "control.db", 3600.0)
    print(f"WAL {checkpointed} B after {restarts} restarts; control {control} B")
    assert control > 20 * 1024 * 1024, control
    assert control_restarts == 0, control_restarts
    assert restarts >= 10, restarts
    assert checkpointed < control / 2, (checkpointed, control)


# Another process writing the same file, as an intake worker does: its own store, its own
# checkpointer, the same write lock (the flock beside the database).
_OTHER_WRITER = """
import asyncio, sys
from tests.store.test_checkpoint import _write_back_to_back
from workflow.store.repo import Store

async def main() -> None:
    store = await Store.open(sys.argv[1])
    assert store.db._checkpointer is not None
    store.db._checkpointer.interval = float(sys.argv[2])
    await _write_back_to_back(store, 800, "q")
    await store.close()

asyncio.run(main())
"""


async def _wal_after_two_writers(path: Path, interval: float) -> tuple[int, int]:
    """The log's size and restarts after two processes commit 800 proposals each, back to
    back, with their checkpointers at `interval`; the chain is whole and every proposal
    stored."""
    url = f"sqlite+aiosqlite:///{path}"
    store = await Store.open(url)  # migrated before the other process starts, as serve does
    assert store.db._checkpointer is not None
    store.db._checkpointer.interval = interval
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _OTHER_WRITER, url, str(interval), cwd=Path(__file__).parents[2]
    )
    try:
        await _write_back_to_back(store, 800)
        assert await other.wait() == 0
        size, restarts = _wal_size(path), _wal_restarts(path)
        async with store.db.engine.connect() as conn:
            count = (await conn.execute(text("SELECT count(*) FROM proposals"))).scalar()
        assert count == 1600
        assert (await store.audit.verify()).ok
        return size, restarts
    finally:
        if other.returncode is None:
            other.kill()
        await store.close()


@pytest.mark.slow
async def test_two_processes_writing_keep_the_wal_small_and_the_chain_whole(
    tmp_path: Path,
) -> None:
    # As above, with each process's checkpointer taking the shared lock for its last pass.
    checkpointed, restarts = await _wal_after_two_writers(tmp_path / "hg.db", 0.0)
    control, control_restarts = await _wal_after_two_writers(tmp_path / "control.db", 3600.0)
    print(f"WAL {checkpointed} B after {restarts} restarts; control {control} B")
    assert control > 40 * 1024 * 1024, control
    assert control_restarts == 0, control_restarts
    assert restarts >= 10, restarts
    assert checkpointed < control / 2, (checkpointed, control)


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


async def _hold_in_another_process(path: Path, seconds: float) -> asyncio.subprocess.Process:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, f"{path}-writer.lock", str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert holder.stdout is not None
    assert await holder.stdout.readline() == b"locked\n"
    return holder


@pytest.mark.slow
async def test_the_write_lock_waits_for_another_process_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hg.db"
    lock = SqliteWriteLock(str(path))
    holder = await _hold_in_another_process(path, 0.5)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with lock:
        waited = loop.time() - started
    ticker.cancel()
    await holder.wait()
    lock.close()
    assert waited > 0.3  # it waited for the other process to let go
    assert ticks > 10  # and the loop went on meanwhile


async def test_a_cancelled_wait_for_the_write_lock_does_not_keep_it(tmp_path: Path) -> None:
    path = tmp_path / "hg.db"
    lock = SqliteWriteLock(str(path))
    holder = await _hold_in_another_process(path, 0.3)

    async def take() -> None:
        async with lock:
            pass

    waiting = asyncio.create_task(take())
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await holder.wait()
    # Neither this process nor another holds it now: a second process gets it at once.
    again = await _hold_in_another_process(path, 0.0)
    assert await again.wait() == 0
    async with lock:
        pass
    lock.close()


async def test_closing_waits_for_a_checkpoint_still_running_in_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled checkpoint task leaves its pass running in the worker thread: closing must
    wait for that thread before it closes the connection, and start no checkpoint after."""
    path = tmp_path / "hg.db"
    conn = _writer(path)
    _round(conn)
    checkpointer = WalCheckpointer(str(path), SqliteWriteLock(str(path)), interval=0.0)
    running, release = threading.Event(), threading.Event()
    passes: list[str] = []
    real = WalCheckpointer._checkpoint

    def slow_checkpoint(self: WalCheckpointer) -> None:
        passes.append("start")
        running.set()
        release.wait(5)
        real(self)
        passes.append("end")

    monkeypatch.setattr(WalCheckpointer, "_checkpoint", slow_checkpoint)
    checkpointer.committed()
    await asyncio.to_thread(running.wait, 5)
    assert checkpointer._task is not None
    checkpointer._task.cancel()  # as when the loop shuts down under it
    closing = asyncio.create_task(checkpointer.close())
    await asyncio.sleep(0.2)
    assert not closing.done()  # the thread is still in its pass
    checkpointer.committed()  # closing: no new checkpoint starts
    release.set()
    await asyncio.wait_for(closing, 5)
    assert passes == ["start", "end"]
    assert checkpointer._conn is None
    conn.close()
