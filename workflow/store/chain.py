"""The hash chain of the audit log. Pure: computing and checking hashes, no database."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from workflow.messages import canonical_json

GENESIS = "0" * 64


class ChainedRecord(Protocol):
    seq: int
    at: str
    kind: str
    proposal_id: str | None
    request_id: str | None
    actor: str
    data: str
    prev_hash: str
    hash: str


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


@dataclass(frozen=True, slots=True)
class ChainCheck:
    ok: bool
    checked: int
    first_bad_seq: int | None = None
    problem: str = ""


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
