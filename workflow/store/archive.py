"""Audit records as JSON Lines: what `headgate audit export` writes and the pruner archives
before it deletes, and reading such files back to verify them against the chain's anchor.

The service's pruner writes one archive per pass (`ArchiveWriter`, a chunk at a time);
earlier versions wrote one per thousand records (`archive_file`): both read the same way.
One record per line, its stored fields exactly (`seq`, `at`, `kind`, `proposal_id`,
`request_id`, `actor`, `data` as the stored text, `prev_hash`, `hash`), so the hashes can be
recomputed from the file alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from workflow.errors import ConfigError
from workflow.store.chain import RECORD_FIELDS, ChainedRecord
from workflow.store.schema import AuditRow

#: The record's fields in sorted order: a line's keys are sorted without sorting each line.
_SORTED_FIELDS = tuple(sorted(RECORD_FIELDS))


def jsonl(row: ChainedRecord) -> str:
    """One record as a line: its stored fields, keys sorted (the pruner hands plain tuples,
    the export row models; both give the same line)."""
    fields = {name: getattr(row, name) for name in _SORTED_FIELDS}
    return json.dumps(fields, ensure_ascii=False) + "\n"


def write_jsonl(path: Path, rows: Iterable[ChainedRecord]) -> int:
    """Write `rows` to `path` durably (a partial file, synced, then renamed into place);
    returns how many were written."""
    partial = path.with_name(path.name + ".partial")
    lines = [jsonl(row) for row in rows]
    with partial.open("w", encoding="utf-8") as out:
        out.write("".join(lines))  # one write: a line at a time cost as much as encoding it
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)
    _sync_dir(path.parent)
    return len(lines)


async def export_jsonl(path: Path, batches: AsyncIterable[Sequence[AuditRow]]) -> int:
    """`write_jsonl` of records read a batch at a time (`AuditLog.batches`): the file is
    written as they come, so memory stays that of one batch; returns how many were written.
    Nothing is left at `path` when reading fails (the partial file is removed)."""
    partial = path.with_name(path.name + ".partial")
    count = 0
    try:
        with partial.open("w", encoding="utf-8") as out:
            async for rows in batches:
                text = "".join(jsonl(row) for row in rows)
                await asyncio.to_thread(out.write, text)
                count += len(rows)
            out.flush()
            await asyncio.to_thread(os.fsync, out.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)
    _sync_dir(path.parent)
    return count


def archive_file(directory: Path, rows: Sequence[ChainedRecord]) -> Path:
    """Archive a pruned prefix of the chain as `audit-<first>-<last>.jsonl` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"audit-{rows[0].seq:012d}-{rows[-1].seq:012d}.jsonl"
    write_jsonl(path, rows)
    return path


def archive_name(first: int, last: int, chain: int = 1) -> str:
    """The name of the archive of records `first`–`last` of `chain`: `audit-<first>-<last>.jsonl`
    on the first chain (the only one on SQLite, and the names of earlier versions),
    `audit-c<chain, 2 digits>-<first>-<last>.jsonl` with 16 digits on the others, so a
    directory lists the chains in order and each chain's archives oldest first."""
    if chain == 1:
        return f"audit-{first:012d}-{last:012d}.jsonl"
    return f"audit-c{chain:02d}-{first:016d}-{last:016d}.jsonl"


#: The pruning pass under way in an archive directory: which archive, which records (one
#: file per audit chain: `pass_file`).
PASS_FILE = "pruning-pass.json"


def pass_file(chain: int = 1) -> str:
    """The name of the record of `chain`'s pass under way (`PASS_FILE` for the first chain,
    the only one on SQLite)."""
    return PASS_FILE if chain == 1 else f"pruning-pass-{chain}.json"


class ArchiveWriter:
    """One archive written a chunk of records at a time (the pruner's pass): a partial file
    until `close` syncs it and renames it (`archive_name`), so an archive under that name is
    always whole. Memory: one chunk's lines."""

    def __init__(self, directory: Path, chain: int = 1):
        self.directory = directory
        self.chain = chain
        self.first: int | None = None
        self.last: int | None = None
        self.records = 0
        self._partial: Path | None = None
        self._out: TextIO | None = None

    def add(self, rows: Sequence[ChainedRecord]) -> None:
        if not rows:
            return
        if self._out is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.first = rows[0].seq
            self._partial = self.directory / f".audit-{self.first:012d}.{os.getpid()}.partial"
            self._out = self._partial.open("w", encoding="utf-8")
        self._out.write("".join(jsonl(row) for row in rows))
        self.last = rows[-1].seq
        self.records += len(rows)

    def close(self) -> Path:
        """Make the archive durable under its name, recording the pass (`pass_file`) first;
        returns its path."""
        assert self._out is not None
        assert self._partial is not None
        assert self.first is not None
        assert self.last is not None
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        self._out = None
        path = self.directory / archive_name(self.first, self.last, self.chain)
        begin_pass(self.directory, path, self.first, self.last, self.chain)
        self._partial.replace(path)
        _sync_dir(self.directory)
        return path

    def discard(self) -> None:
        """Drop what was written (the pass failed before the archive was whole)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._partial is not None:
            self._partial.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class PassUnderWay:
    """A pruning pass whose archive holds records `first`–`last`; deleting them is under way
    until `end_pass`."""

    archive: Path
    first: int
    last: int


def begin_pass(directory: Path, archive: Path, first: int, last: int, chain: int = 1) -> None:
    """Record, durably, that `archive` (records `first`–`last` of `chain`) is being pruned."""
    record = json.dumps({"archive": archive.name, "first": first, "last": last})
    partial = directory / (pass_file(chain) + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        out.write(record + "\n")
        out.flush()
        os.fsync(out.fileno())
    partial.replace(directory / pass_file(chain))
    _sync_dir(directory)


def pass_under_way(directory: Path, chain: int = 1) -> PassUnderWay | None:
    """The pass of `chain` a pruner started in `directory` and did not end (a crash, a
    failure)."""
    name = directory / pass_file(chain)
    try:
        record = json.loads(name.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {name}: {exc}") from exc
    return PassUnderWay(directory / str(record["archive"]), int(record["first"]),
                        int(record["last"]))  # fmt: skip


def end_pass(directory: Path, chain: int = 1) -> None:
    (directory / pass_file(chain)).unlink(missing_ok=True)


#: How long a partial file may go unwritten before it counts as left behind: a pass writes its
#: archive a chunk at a time within seconds, and a pass record is written in one go.
STALE_PARTIAL = 3600.0


def remove_stale_partials(directory: Path, *, older_than: float = STALE_PARTIAL) -> list[Path]:
    """Remove the partial files a writer stopped mid-way left in `directory` (a crash, a kill:
    `.audit-<first>.<pid>.partial`, `pruning-pass*.json.partial`, an export's
    `<name>.partial`), once not written for `older_than` seconds — another replica's archive
    under way is written to every few seconds and is left alone. Returns what was removed.
    Never an archive: only names ending in `.partial`."""
    cutoff = time.time() - older_than
    removed = []
    try:
        candidates = list(directory.glob("*.partial")) + list(directory.glob(".*.partial"))
    except OSError:
        return []
    for path in sorted(set(candidates)):
        try:
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:
            continue  # its writer finished or another replica removed it
    return removed


def last_record(path: Path) -> AuditRow | None:
    """The last record of an archive (read through: archives are bounded)."""
    last = None
    for last in iter_jsonl(path):  # noqa: B007 - the last one is what is wanted
        pass
    return last


def read_jsonl(path: Path) -> list[AuditRow]:
    """The records of an export or archive; a clear error naming the file and line."""
    return list(iter_jsonl(path))


def iter_jsonl(path: Path) -> Iterator[AuditRow]:
    """`read_jsonl` one record at a time (an export of any size in constant memory)."""
    try:
        with path.open(encoding="utf-8") as src:
            for n, line in enumerate(src, 1):
                if not line.strip():
                    continue
                try:
                    row = AuditRow.model_validate(json.loads(line))
                except (ValueError, ValidationError) as exc:
                    raise ConfigError(
                        f"{path}, line {n}: not an audit record ({str(exc).splitlines()[0]})"
                    ) from exc
                yield row
    except OSError as exc:
        raise ConfigError(f"cannot read the audit archive {path}: {exc.strerror}") from exc


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
