"""Rules about cloud, cluster and container tools."""

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
DOMAIN = "cloud"

RULES = (
    rule(
        "shell.cloud_cli",
        X,
        "high",
        "`aws`, `gcloud`, `az`, `kubectl`, `helm`, `terraform`, `docker`, `gh`, …: act on a "
        "cloud or remote service (their read-only subcommands are reads)",
        N,
        domain=DOMAIN,
    ),
    rule(
        "shell.cloud_delete",
        DE,
        "high",
        "a cloud CLI deleting remote resources",
        D,
        N,
        domain=DOMAIN,
    ),
)
