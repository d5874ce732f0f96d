"""What a notification says, tested directly (pure): the call, masked; the intent as the
agent's words; approvals so far; time left; the link."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workflow.messages import (
    ApprovalRecord,
    ApprovalRequirement,
    Classification,
    InboxItem,
    Proposal,
    ProposalHistory,
    Reason,
    Verdict,
)
from workflow.notify.text import INTENT_LABEL, held_notice, history_notice

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SECRET = "sk-ant-abcdefghijklmnopqrstuvwxyz012345"
PROPOSAL = Proposal(
    id="p1", agent="builder-7", workspace="acme", tool="run_shell",
    arguments={"command": f"ANTHROPIC_API_KEY={SECRET} ./deploy.sh"},
    intent=f"deploy with key {SECRET}",
)  # fmt: skip
CLASSIFICATION = Classification(
    risk_class="exec", severity="high",
    reasons=[Reason(rule="shell.env", message=f"`ANTHROPIC_API_KEY={SECRET}` sets a variable")],
)  # fmt: skip
REQUIREMENT = ApprovalRequirement(quorum=2, ttl_seconds=3600)
VERDICT = Verdict(decision="require_approval", reason="exec needs approval")


def item() -> InboxItem:
    return InboxItem(
        request_id="rq_1", proposal_id="p1", proposal=PROPOSAL, proposal_digest="d" * 64,
        classification=CLASSIFICATION, verdict=VERDICT, requirement=REQUIREMENT,
        created_at=NOW, expires_at=NOW + timedelta(hours=1),
    )  # fmt: skip


def test_a_held_notice_names_the_call_and_masks_secrets_everywhere() -> None:
    notice = held_notice(item(), "https://inbox.example.com/")
    text = notice.text(NOW + timedelta(minutes=1))
    assert text.splitlines()[0] == (
        "builder-7 wants run_shell `ANTHROPIC_API_KEY=•••• ./deploy.sh` in acme — exec (high), "
        "0/2 approvals, 59m left"
    )
    assert f'{INTENT_LABEL}: "deploy with key sk-ant-••••"' in text
    assert "Why it is held: `ANTHROPIC_API_KEY=••••` sets a variable" in text
    assert text.endswith("Request rq_1 — https://inbox.example.com/requests/rq_1")
    assert SECRET not in text
    assert SECRET not in str(notice.body(NOW))
    assert notice.title() == "Approval needed: builder-7 · run_shell in acme"
    body = notice.body(NOW)
    assert body["seconds_left"] == 3600
    assert body["intent_verified"] is False


def test_without_an_inbox_url_the_text_says_how_to_look_it_up() -> None:
    assert held_notice(item(), None).text(NOW).endswith("Request rq_1 — headgate show rq_1")


def test_an_outcome_notice_counts_the_approvals_and_gives_the_reason() -> None:
    approval = ApprovalRecord(approver="alice", nonce="n" * 16, issued_at=NOW)
    history = ProposalHistory(
        proposal=PROPOSAL, proposal_digest="d" * 64, status="rejected",
        classification=CLASSIFICATION, verdict=VERDICT, request_id="rq_1",
        requirement=REQUIREMENT, expires_at=NOW + timedelta(hours=1), approvals=[approval],
    )  # fmt: skip
    notice = history_notice("rejected", history, None, detail=f"Rejected by bob: leaks {SECRET}")
    assert notice is not None
    text = notice.text(NOW)
    assert "1/2 approvals (alice)" in text
    assert "Rejected by bob: leaks sk-ant-••••" in text
    assert "left" not in text.splitlines()[0]
    assert notice.created_at == NOW
    assert notice.title() == "Rejected: builder-7 · run_shell in acme"


def test_a_proposal_that_was_never_held_gives_no_notice() -> None:
    history = ProposalHistory(
        proposal=PROPOSAL, proposal_digest="d" * 64, status="released",
        classification=CLASSIFICATION, verdict=VERDICT,
    )  # fmt: skip
    assert history_notice("released", history, None) is None
