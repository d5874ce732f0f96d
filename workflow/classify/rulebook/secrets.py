"""Rules about reading secrets."""

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
DOMAIN = "secrets"

RULES = (
    rule(
        "target.protected_read",
        EG,
        "critical",
        "touching a protected secret location (ssh keys, `.env*`, cloud credentials, keychains, "
        "browser profiles, …)",
        S,
        domain=DOMAIN,
    ),
    rule(
        "target.protected_read_indirect",
        EG,
        "critical",
        "reading a file named by a substitution whose output names a protected location (`cat "
        "$(echo ~/.ssh/id_rsa)`)",
        S,
        domain=DOMAIN,
    ),
    rule(
        "shell.env_dump",
        EG,
        "high",
        "printing the environment (`env`, `printenv`, `export -p`, `ps e`, `jq env`, awk "
        "`ENVIRON`)",
        S,
        domain=DOMAIN,
    ),
    rule(
        "shell.history",
        EG,
        "high",
        "printing the shell history",
        S,
        domain=DOMAIN,
    ),
    rule(
        "shell.secret_store",
        EG,
        "critical",
        "reading a password or secret store (`pass`, `op`, `vault`, `secret-tool`, …)",
        S,
        domain=DOMAIN,
    ),
    rule(
        "shell.keychain",
        EG,
        "critical",
        "reading the macOS keychain (`security find-*`, `dump-*`)",
        S,
        domain=DOMAIN,
    ),
    rule(
        "shell.secret_variable",
        EG,
        "high",
        "expanding a variable whose name says it holds a secret",
        S,
        domain=DOMAIN,
    ),
    rule(
        "shell.cloud_secret",
        EG,
        "critical",
        "a cloud CLI reading credentials (`kubectl get secret`, `aws configure get`, `gcloud "
        "auth print-access-token`, …)",
        S,
        N,
        domain=DOMAIN,
    ),
    rule(
        "target.protected_tree",
        EG,
        "critical",
        "a recursive read of a directory that holds protected locations (`grep -r x ~`)",
        S,
        domain=DOMAIN,
    ),
)
