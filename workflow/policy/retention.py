"""`[retention]`: how long the service keeps what it has decided.

```toml
[retention]
proposals = "30d"               # decided proposals, with their request, decisions, outcome…
audit = "365d"                  # audit records (0: kept for ever, the default)
audit_archive = "audit-archive" # where pruned audit records are written first (JSON Lines)
interval = "1m"                 # how often the pruner runs
```

A proposal still held is never pruned, whatever its age; a decided one is deleted with
everything that belongs to it once its outcome is older than `proposals`. Audit records are
pruned only into an archive: each pruned prefix of the chain is written to `audit_archive` as
JSON Lines before it is deleted, and an anchor (the last pruned record's sequence number and
hash, confirmed by an `audit.pruned` record appended to the chain) keeps what remains
verifiable. Published outbox rows go once the streams' duplicate window has passed; that
needs no setting.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from workflow.policy.durations import Duration, DurationOrZero
from workflow.policy.schema import Strict

#: The default age of a decided proposal when it is pruned (seconds).
DEFAULT_PROPOSALS = 30 * 86400


class RetentionSpec(Strict):
    """`[retention]`: how long decided proposals and audit records are kept (0: for ever)."""

    proposals: DurationOrZero = Field(
        default=DEFAULT_PROPOSALS,
        ge=0,
        description="Decided proposals (request, decisions, outcome, execution reports, events) "
        "are deleted this long after their outcome; 0 keeps them for ever.",
    )
    audit: DurationOrZero = Field(
        default=0,
        ge=0,
        description="Audit records older than this are archived to `audit_archive` and deleted "
        "(the chain stays verifiable from an anchor); 0 keeps them for ever.",
    )
    audit_archive: str | None = Field(
        default=None,
        description="Directory (relative paths: in the data directory) where pruned audit "
        "records are written as JSON Lines before they are deleted.",
    )
    interval: Duration = Field(default=60, ge=1, description="How often the pruner runs.")

    @model_validator(mode="after")
    def _audit_needs_an_archive(self) -> RetentionSpec:
        if self.audit and not self.audit_archive:
            raise ValueError(
                "retention.audit prunes audit records, which needs retention.audit_archive: "
                "the directory the pruned records are written to before they are deleted"
            )
        return self
