"""`headgate bench --retention`: the policy it gives the service."""

from __future__ import annotations

from pathlib import Path

from workflow.bench.runner import p99_windows, retention_policy
from workflow.policy.load import load_policy
from workflow.signing import ApproverKey


def test_the_retention_policy_prunes_proposals_and_audit_and_trusts_the_bot(
    tmp_path: Path,
) -> None:
    policy_path, key_path = retention_policy(tmp_path, 120)
    policy = load_policy(policy_path)
    assert policy.retention.proposals == 120
    assert policy.retention.audit == 120
    assert policy.retention.audit_archive == str(tmp_path / "audit-archive")
    key = ApproverKey.from_file(key_path)
    assert policy.approver_by_key(key.public_key) is not None


def test_p99_windows_compare_the_start_of_a_soak_with_its_end() -> None:
    minutes = [{"read_ms": {"p99": float(p)}} for p in (50, 10, 12, 14, 30, 32, 34)]
    got = p99_windows(minutes)
    assert got["p99_window_minutes"] == 3
    assert got["read_p99_early_ms"] == 12.0  # minutes 2–4, the first one left out
    assert got["read_p99_late_ms"] == 32.0  # the last 3
    assert got["read_p99_late_to_early"] == round(32 / 12, 3)
    assert p99_windows(minutes[:2]) == {}
