"""The Core tables of the schema's models, for the statements the aggregates build."""

from __future__ import annotations

from workflow.store import schema
from workflow.store.engine import table

PROPOSALS = table(schema.ProposalRow)
REQUESTS = table(schema.RequestRow)
DECISIONS = table(schema.DecisionRow)
OUTCOMES = table(schema.OutcomeRow)
EXECUTIONS = table(schema.ExecutionRow)
OUTBOX = table(schema.OutboxRow)
AUDIT = table(schema.AuditRow)
AUDIT_HEAD = table(schema.AuditHeadRow)
AUDIT_ANCHOR = table(schema.AuditAnchorRow)
PASSKEYS = table(schema.PasskeyRow)
INVITES = table(schema.InviteRow)
ESCALATIONS = table(schema.EscalationRow)
GRANTS = table(schema.GrantRow)
GRANT_USES = table(schema.GrantUseRow)
FREEZES = table(schema.FreezeRow)
