"""The intake's classifications of held calls, taken by the collector's re-check at release
only when they are what classifying again would give (`workflow.service.held`)."""

from __future__ import annotations

from tests.policy.policy_helpers import proposal
from workflow.classify.engine import classify
from workflow.policy.load import load_policy_text
from workflow.service.held import HeldClassifications

POLICY = "default_ttl = 300\n"


def test_a_remembered_classification_is_what_classifying_again_gives() -> None:
    policy = load_policy_text(POLICY)
    call = proposal("write_file", arguments={"path": "notes/a.txt", "content": "x"})
    tables = policy.tables_for(call.tool, call.tool_definition)
    held = HeldClassifications()
    held.remember(policy, call.id, call.digest(), classify(call, tables))
    again = held.recall(policy, call.id, call.digest())
    assert again is not None
    assert again == classify(call, tables)


def test_it_is_taken_once_and_only_under_the_same_policy_and_digest() -> None:
    policy = load_policy_text(POLICY)
    reloaded = load_policy_text(POLICY)  # the same text, another object: a reload
    call = proposal("write_file", arguments={"path": "notes/a.txt", "content": "x"})
    classification = classify(call, policy.tables_for(call.tool, call.tool_definition))
    held = HeldClassifications()

    held.remember(policy, call.id, call.digest(), classification)
    assert held.recall(policy, call.id, call.digest()) is classification
    assert held.recall(policy, call.id, call.digest()) is None  # taken: gone

    held.remember(policy, call.id, call.digest(), classification)
    assert held.recall(reloaded, call.id, call.digest()) is None  # the policy was reloaded
    assert len(held) == 0

    held.remember(policy, call.id, call.digest(), classification)
    assert held.recall(policy, call.id, "another digest") is None
    assert len(held) == 0


def test_it_keeps_at_most_its_limit_oldest_out_first() -> None:
    policy = load_policy_text(POLICY)
    call = proposal("write_file", arguments={"path": "notes/a.txt", "content": "x"})
    classification = classify(call, policy.tables_for(call.tool, call.tool_definition))
    held = HeldClassifications(limit=3)
    for n in range(5):
        held.remember(policy, f"p-{n}", "d", classification)
    assert len(held) == 3
    assert held.recall(policy, "p-0", "d") is None
    assert held.recall(policy, "p-1", "d") is None
    assert held.recall(policy, "p-4", "d") is classification
