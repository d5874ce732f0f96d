"""Ids derived from a proposal id: its approval request and its release.

Pure and light, so the service (`workflow.routing`) and the per-call hook path derive the
same ids; a redelivered message rebuilds exactly the same ones.
"""

from __future__ import annotations

import hashlib


def _derive(prefix: str, proposal_id: str) -> str:
    return f"{prefix}_{hashlib.sha256(proposal_id.encode()).hexdigest()[:24]}"


def request_id_for(proposal_id: str) -> str:
    return _derive("rq", proposal_id)


def release_id_for(proposal_id: str) -> str:
    return _derive("rl", proposal_id)


# `Nats-Msg-Id`s of what an agent publishes. JetStream deduplicates by this header across a
# whole stream, so each carries the publishing agent: another agent naming the same proposal
# (ids are chosen by agents) can then never have its copy taken for this agent's, nor this
# agent's retry dropped as a duplicate of its own.


def proposal_msg_id(agent: str, proposal_id: str) -> str:
    return f"{agent}:{proposal_id}"


def cancel_msg_id(agent: str, proposal_id: str) -> str:
    return f"cancel:{agent}:{proposal_id}"


def report_msg_id(agent: str, release_id: str) -> str:
    return f"executed:{agent}:{release_id}"
