"""What a human sees of a pending call: secrets masked, the target named. Pure functions.

`summarize` is the one sentence every notification uses (the inbox view, an approver's
notifier): it says *what* is pending — agent, tool, and the command or target — never just
"approval needed".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from workflow.controls import FreezeInfo
from workflow.masking import MASK as MASK
from workflow.masking import is_secret_key as is_secret_key
from workflow.masking import mask_secrets as mask_secrets
from workflow.masking import mask_text as mask_text
from workflow.messages import PendingEntry, ProposalHistory

# Argument names that say what a call acts on, most telling first.
_TARGET_KEYS = (
    "command", "cmd", "script", "sql", "query", "statement", "url", "uri", "endpoint", "host",
    "path", "file_path", "filepath", "file", "filename", "target", "destination", "dest", "to",
    "repo", "repository", "branch", "table", "bucket", "key_name", "name", "id",
)  # fmt: skip


def target_of(arguments: Mapping[str, Any], limit: int = 120) -> str:
    """The command or target of a call, masked and shortened: what an approver must see first."""
    masked = mask_secrets(dict(arguments))
    for key in _TARGET_KEYS:
        value = masked.get(key)
        if value not in (None, "", [], {}):
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            return _shorten(text, limit)
    if not masked:
        return ""
    return _shorten(json.dumps(masked, ensure_ascii=False, sort_keys=True), limit)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def time_left(expires_at: datetime, now: datetime) -> str:
    """`59m`, `2h05m`, `12s`, or `expired`."""
    seconds = int((expires_at - now).total_seconds())
    if seconds <= 0:
        return "expired"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


class Summarizable(Protocol):
    """What `summarize` reads: an SDK `PendingRequest` or an `api.pending` entry both fit."""

    @property
    def agent(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def risk_class(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def approvals(self) -> list[str]: ...
    @property
    def expires_at(self) -> datetime: ...


#: How the agent's own description of a call is introduced wherever it is shown: it is what
#: the agent says, which a prompt-injected agent can make up.
INTENT_LABEL = "the agent says (unverified)"


def intent_text(intent: str | None, limit: int = 160) -> str | None:
    """The intent as shown to a human: secrets masked, on one line, shortened; None if none."""
    if not intent or not intent.strip():
        return None
    return _shorten(mask_text(intent), limit)


def summarize(item: Summarizable, now: datetime | None = None) -> str:
    """One line naming what is pending, e.g.

    ``builder-7 wants run_shell `git push origin main` in acme — exec (high), 0/1 approvals,
    expires in 59m; the agent says (unverified): "publish the fix"``
    """
    target = target_of(item.arguments)
    what = f"{item.tool} `{target}`" if target else item.tool
    parts = [
        f"{item.agent} wants {what} in {item.workspace}",
        f"{item.risk_class} ({item.severity})",
    ]
    needed = getattr(getattr(item, "requirement", None), "approvals_needed", None)
    count = f"{len(item.approvals)}/{needed}" if needed else str(len(item.approvals))
    parts.append(
        f"{count} approvals" + (f" ({', '.join(item.approvals)})" if item.approvals else "")
    )
    if now is not None:
        left = time_left(item.expires_at, now)
        parts.append(left if left == "expired" else f"expires in {left}")
    line = f"{parts[0]} — " + ", ".join(parts[1:])
    said = intent_text(_intent_of(item))
    return f'{line}; {INTENT_LABEL}: "{said}"' if said else line


def _intent_of(item: Summarizable) -> str | None:
    intent = getattr(item, "intent", None)
    if intent is None:
        proposal = getattr(item, "proposal", None)
        intent = getattr(proposal, "intent", None)
    return intent if isinstance(intent, str) else None


def masked_entry(entry: PendingEntry) -> PendingEntry:
    """A pending entry as a human or a script may see it: secrets masked in the arguments, the
    reasons and the intent (the digest still names the real proposal)."""
    return entry.model_copy(
        update={
            "arguments": mask_secrets(entry.arguments),
            "reasons": [mask_text(r) for r in entry.reasons],
            "intent": mask_text(entry.intent) if entry.intent else entry.intent,
        }
    )


def masked_history(history: ProposalHistory) -> ProposalHistory:
    """A proposal's history with secrets masked wherever a human reads text: arguments,
    intent, classification reasons, the verdict and its trail, approvals and events."""
    p, c, v = history.proposal, history.classification, history.verdict
    proposal = p.model_copy(
        update={
            "arguments": mask_secrets(p.arguments),
            "intent": mask_text(p.intent) if p.intent else p.intent,
        }
    )
    reasons = [r.model_copy(update={"message": mask_text(r.message)}) for r in c.reasons]
    trail = [t.model_copy(update={"message": mask_text(t.message)}) for t in v.trail]
    return history.model_copy(
        update={
            "proposal": proposal,
            "classification": c.model_copy(update={"reasons": reasons}),
            "verdict": v.model_copy(update={"reason": mask_text(v.reason), "trail": trail}),
            "approvals": [
                a.model_copy(update={"reason": mask_text(a.reason)}) for a in history.approvals
            ],
            "events": [
                e.model_copy(update={"summary": mask_text(e.summary), "data": _masked_data(e.data)})
                for e in history.events
            ],
        }
    )


#: Event fields holding text a person wrote or a tool printed. The rest (keys, signatures,
#: the signed decision itself) is verification material and stays as it is.
_TEXT_FIELDS = ("message", "reason", "summary")


def _masked_data(data: dict[str, Any]) -> dict[str, Any]:
    return {
        k: mask_text(v) if k in _TEXT_FIELDS and isinstance(v, str) else v for k, v in data.items()
    }


def describe_freeze(freeze: FreezeInfo) -> str:
    """One freeze in force, in words: its scope, what it holds, who, when and why."""
    scope = " in ".join(
        part
        for part in (
            f"agent {freeze.agent}" if freeze.agent else "",
            f"workspace {freeze.workspace}" if freeze.workspace else "",
        )
        if part
    )
    calls = "every call" if freeze.all_calls else "every call but reads"
    why = f": {mask_text(freeze.reason)}" if freeze.reason else ""
    return (
        f"{calls} of {scope or 'every agent and workspace'} is held "
        f"(by {freeze.by}, {freeze.at:%Y-%m-%d %H:%M} UTC){why}"
    )
