"""`[retention]`: ages as durations, 0 keeping everything for ever (as documented)."""

from __future__ import annotations

import pytest

from workflow.errors import PolicyError
from workflow.policy.load import load_policy_text


def test_zero_keeps_proposals_and_audit_for_ever() -> None:
    for zero in ("0", '"0"', '"0s"'):
        policy = load_policy_text(f"[retention]\nproposals = {zero}\naudit = {zero}\n")
        assert (policy.retention.proposals, policy.retention.audit) == (0, 0)


def test_ages_parse_and_the_interval_stays_positive() -> None:
    text = '[retention]\nproposals = "7d"\naudit = "1h"\naudit_archive = "a"\ninterval = "2m"\n'
    spec = load_policy_text(text).retention
    assert (spec.proposals, spec.audit, spec.interval) == (7 * 86400, 3600, 120)
    with pytest.raises(PolicyError, match="interval"):
        load_policy_text("[retention]\ninterval = 0\n")
