"""Rules about the command line itself."""

from __future__ import annotations

from workflow.classify.rulebook.spec import rule
from workflow.classify.taxonomy import Category, RiskClass

R, EG, EXT, W, X, DE = (
    RiskClass.READ,
    RiskClass.EGRESS,
    RiskClass.EXTERNAL,
    RiskClass.WRITE_LOCAL,
    RiskClass.EXEC,
    RiskClass.DESTRUCTIVE,
)
D, P, N, S = Category.DESTRUCTIVE, Category.PRIVILEGED, Category.NETWORK, Category.SECRET_ACCESS
_ = (R, EG, EXT, W, X, DE, D, P, N, S)
DOMAIN = "shell"

RULES = (
    rule(
        "shell.unparseable",
        X,
        "critical",
        "a command that does not parse; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.unsupported_shell",
        X,
        "high",
        "a shell other than bash/sh/zsh/dash; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.empty",
        X,
        "high",
        "an empty command; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.no_command",
        X,
        "high",
        "a shell tool called without a command; fails closed",
        domain=DOMAIN,
    ),
)
