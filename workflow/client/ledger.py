"""The unattended agent's local ledger: one row per enqueued call, in a SQLite file.

States: ``queued`` (enqueued; the worker runs its release) → ``started`` (committed *before*
the handler runs) → ``finished`` (committed after it returns or raises). A row found
``started`` by a later worker means the previous worker stopped while the handler ran: the
side effects may or may not have happened, so the call is **not** run again; it becomes
``unknown`` and is reported as such (at-most-once for side effects). A blocked call becomes
``blocked`` with its outcome (denied / rejected / expired / cancelled).

The file is written with ``synchronous=FULL``: a ``started`` mark must be on disk before the
side effect it guards. Calls are sub-millisecond to a few milliseconds, so they run inline.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal

from workflow.errors import ConfigError
from workflow.outcomes import Outcome

#: A queued call's local lifecycle (not an outcome: a call is `blocked` with its `Outcome`).
State = Literal["queued", "started", "finished", "unknown", "blocked"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    proposal_id TEXT PRIMARY KEY,
    tool        TEXT NOT NULL,
    state       TEXT NOT NULL,
    request_id  TEXT,
    release_id  TEXT,
    success     INTEGER,
    summary     TEXT NOT NULL DEFAULT '',
    outcome     TEXT,
    queued_at   TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT
)
"""


@dataclass(frozen=True, slots=True)
class Entry:
    proposal_id: str
    tool: str
    state: State
    request_id: str | None
    release_id: str | None
    success: bool | None
    summary: str
    outcome: Outcome | None
    finished_at: datetime | None


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Ledger:
    """A SQLite ledger of enqueued calls and what became of them."""

    FILE = "headgate-ledger.sqlite3"

    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / self.FILE
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        self._lock: IO[bytes] | None = None

    def close(self) -> None:
        self.release_worker_lock()
        self._db.close()

    # ------------------------------------------------------------------ one worker per ledger
    def take_worker_lock(self) -> None:
        """Only one `run_released` per ledger: a second one would see the first one's
        ``started`` rows and wrongly take them for a crash."""
        fh = (self.path.parent / "headgate-worker.lock").open("ab")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.close()
            raise ConfigError(
                "another run_released worker is using this state dir; run one worker per agent "
                "and state dir",
                source=str(self.path.parent),
            ) from exc
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n".encode())
        fh.flush()
        self._lock = fh

    def release_worker_lock(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    # ------------------------------------------------------------------ transitions
    def queue(self, proposal_id: str, tool: str) -> None:
        self._db.execute(
            "INSERT OR IGNORE INTO calls (proposal_id, tool, state, queued_at) "
            "VALUES (?, ?, 'queued', ?)",
            (proposal_id, tool, _now()),
        )

    def note_request(self, proposal_id: str, request_id: str) -> None:
        self._db.execute(
            "UPDATE calls SET request_id = ? WHERE proposal_id = ?", (request_id, proposal_id)
        )

    def claim(self, proposal_id: str, release_id: str) -> bool:
        """queued → started, atomically; False when the row was not queued."""
        cur = self._db.execute(
            "UPDATE calls SET state = 'started', release_id = ?, started_at = ? "
            "WHERE proposal_id = ? AND state = 'queued'",
            (release_id, _now(), proposal_id),
        )
        return cur.rowcount == 1

    def finish(self, proposal_id: str, success: bool, summary: str) -> None:
        self._db.execute(
            "UPDATE calls SET state = 'finished', success = ?, summary = ?, finished_at = ? "
            "WHERE proposal_id = ? AND state = 'started'",
            (int(success), summary, _now(), proposal_id),
        )

    def mark_unknown(self, proposal_id: str, summary: str) -> None:
        self._db.execute(
            "UPDATE calls SET state = 'unknown', success = 0, summary = ?, finished_at = ? "
            "WHERE proposal_id = ? AND state = 'started'",
            (summary, _now(), proposal_id),
        )

    def block(self, proposal_id: str, outcome: Outcome, reason: str) -> None:
        self._db.execute(
            "UPDATE calls SET state = 'blocked', outcome = ?, summary = ?, finished_at = ? "
            "WHERE proposal_id = ? AND state = 'queued'",
            (outcome, reason, _now(), proposal_id),
        )

    # ------------------------------------------------------------------ queries
    def get(self, proposal_id: str) -> Entry | None:
        row = self._db.execute(
            "SELECT proposal_id, tool, state, request_id, release_id, success, summary, outcome, "
            "finished_at FROM calls WHERE proposal_id = ?",
            (proposal_id,),
        ).fetchone()
        return _entry(row) if row else None

    def entries(self) -> list[Entry]:
        rows = self._db.execute(
            "SELECT proposal_id, tool, state, request_id, release_id, success, summary, outcome, "
            "finished_at FROM calls ORDER BY queued_at, proposal_id"
        ).fetchall()
        return [_entry(row) for row in rows]


def _entry(row: tuple[object, ...]) -> Entry:
    pid, tool, state, request_id, release_id, success, summary, outcome, finished = row
    return Entry(
        proposal_id=str(pid),
        tool=str(tool),
        state=state,  # type: ignore[arg-type]
        request_id=request_id if isinstance(request_id, str) else None,
        release_id=release_id if isinstance(release_id, str) else None,
        success=None if success is None else bool(success),
        summary=str(summary),
        outcome=Outcome(outcome) if isinstance(outcome, str) else None,
        finished_at=datetime.fromisoformat(finished) if isinstance(finished, str) else None,
    )
