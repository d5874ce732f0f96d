"""Rules about git."""

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
DOMAIN = "git"

RULES = (
    rule(
        "shell.git_config_injection",
        X,
        "high",
        "`git -c`, `--config-env`, `--exec-path=`: configuration for one run, which can name "
        "programs git runs",
        domain=DOMAIN,
    ),
    rule(
        "shell.git_network",
        X,
        "high",
        "`git push|fetch|pull|clone|ls-remote|archive|send-email`, `remote show NAME`, "
        "`submodule update`: talk to a remote",
        N,
        domain=DOMAIN,
    ),
    rule(
        "shell.git_destructive",
        DE,
        "high",
        "`push --force|--delete|+ref`, `reset --hard`, `clean -f`, `checkout -- .`, `restore`, "
        "`branch -D`, `stash drop|clear`, `filter-branch`, `reflog expire`, `gc --prune`",
        D,
        domain=DOMAIN,
    ),
)
