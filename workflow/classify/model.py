"""The optional model classifier (layer 7), pure part: its config, the request it sends and
how its answer is merged.

The model sees only the command, the working directory and the shell, never the agent's intent
or anything else from the proposal: the agent's own words must not steer the check. Its answer
may only raise the classification; an error, a timeout or a malformed answer changes nothing
except for a reason saying the check failed. The HTTP call lives in
`workflow.service.model_check`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from workflow.classify.findings import Accumulator, finding, note
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.messages import Classification, Proposal

SYSTEM_PROMPT = (
    "You classify one shell command an AI agent wants to run. Answer with strict JSON only, "
    'no prose: {"risk": R, "categories": [C, ...], "reason": "one sentence"} where R is one of '
    '"read", "egress", "external", "write_local", "exec", "destructive" and each C is one of '
    '"destructive", "privileged", "network", "secret_access". "read" means the command only '
    "reads non-secret local data. When unsure, choose the stricter class."
)

#: The severity a model-raised class carries; the model gives no severity of its own.
MODEL_SEVERITY: dict[RiskClass, Severity] = {
    RiskClass.READ: Severity.LOW,
    RiskClass.EGRESS: Severity.MEDIUM,
    RiskClass.EXTERNAL: Severity.HIGH,
    RiskClass.WRITE_LOCAL: Severity.MEDIUM,
    RiskClass.EXEC: Severity.HIGH,
    RiskClass.DESTRUCTIVE: Severity.HIGH,
}


class ModelClassifierConfig(BaseModel):
    """An OpenAI-compatible chat-completions endpoint used as an extra, raise-only check."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=False, description="Off unless set to true.")
    base_url: str = Field(
        default="http://127.0.0.1:8000",
        description="Base URL of an OpenAI-compatible server; `/v1/chat/completions` is appended.",
    )
    model: str = Field(default="", description="Model name sent in the request.")
    api_key_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the API key (the key itself "
        "never goes in the policy file). None sends no Authorization header.",
    )
    timeout_seconds: float = Field(
        default=5.0, gt=0, le=120, description="Whole-request timeout; on expiry nothing changes."
    )


def command_of(proposal: Proposal) -> str | None:
    """The shell command in a proposal's arguments (`command`, `cmd`, or an argv list)."""
    for key in ("command", "cmd"):
        value = proposal.arguments.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return shlex.join(value)
    return None


def build_request(proposal: Proposal, config: ModelClassifierConfig) -> dict[str, Any]:
    """The chat-completions body: the command, cwd and shell only."""
    ctx = proposal.context
    subject = {
        "command": command_of(proposal) or "",
        "cwd": ctx.cwd if ctx else None,
        "shell": ctx.shell if ctx else None,
    }
    return {
        "model": config.model,
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps(subject, sort_keys=True)},
        ],
    }


def _parse_answer(raw: str) -> tuple[RiskClass, frozenset[Category], str] | str:
    """The (risk, categories, reason) in a model answer, or a sentence saying what is wrong."""
    try:
        data = json.loads(raw)
    except ValueError:
        return "its answer was not JSON"
    if not isinstance(data, dict):
        return "its answer was not a JSON object"
    risk_text, cats, reason = data.get("risk"), data.get("categories", []), data.get("reason")
    if not isinstance(risk_text, str) or risk_text not in RiskClass.__members__.values():
        return f"its answer named an unknown risk class {risk_text!r}"
    if not isinstance(cats, list) or not all(
        isinstance(c, str) and c in Category.__members__.values() for c in cats
    ):
        return f"its answer named unknown categories {cats!r}"
    if not isinstance(reason, str) or not reason.strip():
        return "its answer gave no reason"
    return RiskClass(risk_text), frozenset(Category(c) for c in cats), reason.strip()[:300]


def merge_model_answer(
    classification: Classification, raw_answer_text: str | None, error: str | None
) -> Classification:
    """Fold the model's answer into a classification; it may only raise it."""
    acc = Accumulator(
        risk=classification.risk_class,
        severity=classification.severity,
        categories=set(classification.categories),
        fail_closed=classification.fail_closed,
    )
    reasons = list(classification.reasons)
    parsed: tuple[RiskClass, frozenset[Category], str] | str
    if error is not None:
        parsed = error
    elif raw_answer_text is None:
        parsed = "it returned no answer"
    else:
        parsed = _parse_answer(raw_answer_text)
    if isinstance(parsed, str):
        item = note(
            "model.failed",
            f"The model check failed ({parsed}); the classification is unchanged.",
        )
    else:
        risk, cats, reason = parsed
        item = finding(
            "model.answer",
            f"The model classifier says {risk}: {reason}",
            risk,
            MODEL_SEVERITY[risk],
            *sorted(cats),
        )
    acc.add(item)
    reasons.append(item.reason())
    return classification.model_copy(
        update={
            "risk_class": acc.risk,
            "severity": acc.severity,
            "categories": sorted(acc.categories),
            "reasons": reasons,
        }
    )
