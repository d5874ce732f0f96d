"""Rules about database clients."""

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
DOMAIN = "databases"

RULES = (
    rule(
        "shell.sql_drop",
        DE,
        "critical",
        "`DROP TABLE|DATABASE|…`, `TRUNCATE`",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.sql_delete_all",
        DE,
        "critical",
        "`DELETE` without `WHERE`",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.sql_update_all",
        DE,
        "critical",
        "`UPDATE` without `WHERE`",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.sql_privileges",
        X,
        "high",
        "`GRANT`, `REVOKE`, `CREATE|ALTER USER`, `ALTER ROLE`",
        P,
        domain=DOMAIN,
    ),
    rule(
        "shell.redis_flush",
        DE,
        "critical",
        "`redis-cli FLUSHALL|FLUSHDB`",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.mongo_drop",
        DE,
        "critical",
        "`dropDatabase()`, `.drop()`, `deleteMany({})`",
        D,
        domain=DOMAIN,
    ),
)
