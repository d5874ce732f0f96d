"""Rules about package managers and registries."""

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
DOMAIN = "packages"

RULES = (
    rule(
        "shell.package_install",
        X,
        "high",
        "installing or removing packages (`apt install`, `pip install`, `npm i`, …)",
        N,
        domain=DOMAIN,
    ),
    rule(
        "shell.package_system",
        X,
        "high",
        "changing system-wide packages (`apt`, `dnf`, `pip --break-system-packages`, `npm -g`, …)",
        P,
        domain=DOMAIN,
    ),
    rule(
        "packages.registry_query",
        EG,
        "medium",
        "a read-only subcommand that asks a registry (`npm view`, `npm outdated`, `pip index`, "
        "`pip list --outdated`)",
        N,
        domain=DOMAIN,
    ),
    rule(
        "packages.network_fetch",
        X,
        "high",
        "a subcommand that fetches from the network and then builds or writes (`pip download`, "
        "`go mod download`, `openssl s_client`)",
        N,
        domain=DOMAIN,
    ),
)
