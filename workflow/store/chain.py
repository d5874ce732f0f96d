"""The hash chain of the audit log. Pure: computing and checking hashes, no database."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from workflow.messages import canonical_json

GENESIS = "0" * 64


class ChainedRecord(Protocol):
    """A stored record of the chain: a row model, or the plain tuple the pruner reads."""

    @property
    def seq(self) -> int: ...
    @property
    def at(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def proposal_id(self) -> str | None: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def actor(self) -> str: ...
    @property
    def data(self) -> str: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


#: The fields of a record, in the order the chain hashes them and the archive sorts them.
RECORD_FIELDS = (
    "seq", "at", "kind", "proposal_id", "request_id", "actor", "data", "prev_hash", "hash",
)  # fmt: skip


def chain_hash(
    prev_hash: str,
    seq: int,
    at: str,
    kind: str,
    proposal_id: str | None,
    request_id: str | None,
    actor: str,
    data: str,
) -> str:
    body = canonical_json([prev_hash, seq, at, kind, proposal_id, request_id, actor, data])
    return hashlib.sha256(body.encode()).hexdigest()


#: The kind of the record each pruning appends: it confirms the anchor from within the chain.
PRUNED_KIND = "audit.pruned"


@dataclass(frozen=True, slots=True)
class ChainCheck:
    ok: bool
    checked: int
    first_bad_seq: int | None = None
    problem: str = ""
    #: The chain was checked from this anchor (the last pruned record); 0: from its genesis.
    anchor_seq: int = 0


def verify_chain(records: Iterable[ChainedRecord], start_hash: str = GENESIS) -> ChainCheck:
    """Walk the records in sequence order; report the first one that breaks the chain."""
    prev = start_hash
    expected_seq: int | None = None
    checked = 0
    for rec in records:
        if expected_seq is not None and rec.seq != expected_seq:
            return ChainCheck(
                False, checked, rec.seq, f"record {expected_seq} is missing (found {rec.seq})."
            )
        if rec.prev_hash != prev:
            return ChainCheck(
                False, checked, rec.seq, f"record {rec.seq} does not point at the previous hash."
            )
        want = chain_hash(
            rec.prev_hash,
            rec.seq,
            rec.at,
            rec.kind,
            rec.proposal_id,
            rec.request_id,
            rec.actor,
            rec.data,
        )
        if want != rec.hash:
            return ChainCheck(
                False, checked, rec.seq, f"record {rec.seq} was altered (its hash does not match)."
            )
        prev = rec.hash
        expected_seq = rec.seq + 1
        checked += 1
    return ChainCheck(True, checked)


def pruned_anchor(data: str) -> tuple[int, str] | None:
    """The anchor (through_seq, through_hash) an `audit.pruned` record's data names."""
    try:
        got = json.loads(data)
        return int(got["through_seq"]), str(got["through_hash"])
    except (ValueError, KeyError, TypeError):
        return None


def verify_archive(
    records: Iterable[ChainedRecord], anchor: tuple[int, str] | None = None
) -> ChainCheck:
    """Check archived records (one or several consecutive archives, in order): they chain
    from their first record's predecessor (the genesis when they start at record 1), and the
    record at `anchor`'s sequence number, when they hold it, has the anchor's hash. One pass
    over `records`, which may be a stream of any length."""
    stream = iter(records)
    first = next(stream, None)
    if first is None:
        return ChainCheck(True, 0)
    if first.seq == 1 and first.prev_hash != GENESIS:
        return ChainCheck(False, 0, 1, "record 1 does not start from the genesis hash.")
    seen: dict[str, ChainedRecord] = {}

    def watched() -> Iterator[ChainedRecord]:
        for rec in itertools.chain((first,), stream):
            seen["last"] = rec
            if anchor is not None and rec.seq == anchor[0]:
                seen["anchor"] = rec
            yield rec

    result = verify_chain(watched(), start_hash=first.prev_hash)
    if not result.ok or anchor is None:
        return result
    seq, digest = anchor
    at_anchor, last = seen.get("anchor"), seen["last"]
    if at_anchor is not None and at_anchor.hash != digest:
        return ChainCheck(
            False, result.checked, seq, f"record {seq} does not have the anchor's hash."
        )
    if at_anchor is None and last.seq < seq:
        return ChainCheck(
            False,
            result.checked,
            last.seq + 1,
            f"the archive ends at record {last.seq}, before the anchor ({seq}): records "
            f"{last.seq + 1}–{seq} are in no archive given.",
        )
    return result
