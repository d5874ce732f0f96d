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
