"""Every classifier rule, declared once: its literal id, the class and severity it gives, its
categories and what it matches, in a module named after its domain.

`RULEBOOK` maps each id to its declaration; `headgate rules` lists them and `docs/rules.md` is
generated from them (`python -m workflow.classify.rulebook > docs/rules.md`). A test checks
that every id the classifier emits is declared here and every declaration is used.
"""

from __future__ import annotations

from workflow.classify.rulebook import (
    cloud,
    databases,
    files,
    git,
    network,
    packages,
    privilege,
    processes,
    secrets,
    shell,
    tools,
)
from workflow.classify.rulebook.spec import RuleSpec, deciding_reason, render_markdown

DOMAINS = (
    files,
    network,
    git,
    packages,
    privilege,
    secrets,
    cloud,
    databases,
    processes,
    shell,
    tools,
)


def _collect() -> dict[str, RuleSpec]:
    out: dict[str, RuleSpec] = {}
    for module in DOMAINS:
        for spec in module.RULES:
            if spec.id in out:
                raise ValueError(f"rule {spec.id} is declared twice")
            out[spec.id] = spec
    return out


RULEBOOK: dict[str, RuleSpec] = _collect()

__all__ = ["DOMAINS", "RULEBOOK", "RuleSpec", "deciding_reason", "render_markdown"]
