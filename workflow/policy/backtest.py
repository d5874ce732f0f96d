"""Backtest a policy over history: what would a new policy have decided? Pure.

Every stored proposal is classified and evaluated again under the new policy, exactly as the
intake would (`classify` + `evaluate`), and compared with the decision stored for it. The
report says how many calls would have been allowed / held / denied instead, which tools and
agents are behind the differences, the approval load (prompts per day) before and after, and
a few examples of each change.

Calls arrive one at a time (`Backtest.add`), so the caller streams them from the store and
nothing holds the history in memory. Classification and evaluation do not depend on the
proposal's id, agent, intent or time, so calls that differ only in those are decided once
(a bounded cache): histories repeat themselves a lot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json, to_json

from workflow.classify.engine import classify
from workflow.messages import Decision, Proposal
from workflow.policy.engine import evaluate
from workflow.policy.model import Policy

#: Fields of a proposal that neither the classifier nor the policy reads.
_IRRELEVANT = ("id", "agent", "intent", "created_at")
CACHE_SIZE = 200_000


@dataclass(frozen=True, slots=True)
class PastCall:
    """One stored proposal and the decision it got; `received_at` as the store's text (ISO
    date first: its first ten characters are the day)."""

    proposal_id: str
    agent: str
    tool: str
    decision: str
    payload: str
    received_at: str


@dataclass(slots=True)
class Change:
    proposal_id: str
    agent: str
    tool: str
    before: str
    after: str
    reason: str
    at: str


_PROMPT = Decision.REQUIRE_APPROVAL.value
_DECISIONS = [d.value for d in Decision]


@dataclass
class Backtest:
    policy: Policy
    examples: int = 3
    total: int = 0
    unreadable: int = 0
    #: (stored decision, new decision, day) -> calls: one counter update per call.
    cells: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    agents: Counter[str] = field(default_factory=Counter)
    samples: dict[tuple[str, str], list[Change]] = field(default_factory=dict)
    decided: int = 0
    _cache: dict[bytes, tuple[str, str]] = field(default_factory=dict)

    def verdict_of(self, payload: str) -> tuple[str, str] | None:
        """The new policy's decision (and its reason) for a stored payload, or None when the
        payload is no longer a valid proposal."""
        try:
            raw = from_json(payload)
        except ValueError:
            return None
        if not isinstance(raw, dict):
            return None
        for name in _IRRELEVANT:
            raw.pop(name, None)
        key = to_json(raw)
        found = self._cache.get(key)
        if found is not None:
            return found
        try:
            proposal = Proposal.model_validate({**raw, "id": "backtest", "agent": "backtest"})
        except ValueError:
            return None
        tables = self.policy.tables_for(proposal.tool, proposal.tool_definition)
        verdict = evaluate(proposal, classify(proposal, tables), self.policy)
        found = (verdict.decision.value, verdict.reason)
        self.decided += 1
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()  # bounded: a history of ever-new calls starts over
        self._cache[key] = found
        return found

    def add(self, call: PastCall) -> None:
        self.total += 1
        new = self.verdict_of(call.payload)
        if new is None:
            self.unreadable += 1
            return
        after, reason = new
        before = call.decision
        self.cells[(before, after, call.received_at[:10])] += 1
        if before == after:
            return
        self.tools[call.tool] += 1
        self.agents[call.agent] += 1
        kept = self.samples.setdefault((before, after), [])
        if len(kept) < self.examples:
            kept.append(
                Change(call.proposal_id, call.agent, call.tool, before, after, reason,
                       call.received_at)
            )  # fmt: skip

    def report(self) -> dict[str, Any]:
        """The result as plain data (what `--json` prints)."""
        before: Counter[str] = Counter()
        after: Counter[str] = Counter()
        transitions: Counter[tuple[str, str]] = Counter()
        prompts: dict[str, list[int]] = {}
        for (b, a, day), n in self.cells.items():
            before[b] += n
            after[a] += n
            if a != b:
                transitions[(b, a)] += n
            load = prompts.setdefault(day, [0, 0])
            load[0] += n if b == _PROMPT else 0
            load[1] += n if a == _PROMPT else 0
        days = sorted(prompts)
        return {
            "policy_revision": self.policy.revision,
            "proposals": self.total,
            "unreadable": self.unreadable,
            "distinct_calls_evaluated": self.decided,
            "changed": sum(transitions.values()),
            "before": {d: before[d] for d in _DECISIONS},
            "after": {d: after[d] for d in _DECISIONS},
            "changes": [
                {"from": b, "to": a, "count": n} for (b, a), n in transitions.most_common()
            ],
            "tools": dict(self.tools.most_common(10)),
            "agents": dict(self.agents.most_common(10)),
            "prompts_per_day": {
                "before": _mean([prompts[d][0] for d in days]),
                "after": _mean([prompts[d][1] for d in days]),
                "days": [{"day": d, "before": prompts[d][0], "after": prompts[d][1]} for d in days],
            },
            "examples": [
                {"from": b, "to": a, "calls": [vars_of(c) for c in calls]}
                for (b, a), calls in self.samples.items()
            ],
        }


def _mean(values: list[int]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def vars_of(change: Change) -> dict[str, str]:
    return {
        "proposal_id": change.proposal_id,
        "agent": change.agent,
        "tool": change.tool,
        "before": change.before,
        "after": change.after,
        "reason": change.reason,
        "at": change.at,
    }
