"""The store: the service's database, by aggregate, over one `Database`.

| aggregate | module | holds |
|---|---|---|
| `proposals` | `store.proposals` | the intake's rows, and what rebuilds its events |
| `requests` | `store.requests` | approval requests and decisions; approval steps |
| `outbox` | `store.outbox` | events awaiting publication |
| `audit` | `store.audit` | the hash-chained audit log |
| `executions` | `store.executions` | agents' execution reports |
| `passkeys` | `store.passkeys` | approvers' passkeys and the invitations that register them |
| `escalations` | `store.escalations` | how far each request climbed its escalation ladder |
| `retention` | `store.retention` | pruning what the retention policy no longer keeps |
| `grants` | `store.grants` | approvers' grants, their uses, and the freezes in force |
"""

from __future__ import annotations

from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.escalations import Escalations
from workflow.store.executions import Executions
from workflow.store.grants import Grants
from workflow.store.outbox import Outbox
from workflow.store.passkeys import Passkeys
from workflow.store.proposals import Proposals
from workflow.store.requests import Requests
from workflow.store.retention import Retention


class Store:
    def __init__(self, db: Database):
        self.db = db
        self.audit = AuditLog(db)
        self.outbox = Outbox(db)
        self.proposals = Proposals(db, self.audit)
        self.requests = Requests(db, self.outbox, self.audit)
        self.executions = Executions(db, self.audit)
        self.passkeys = Passkeys(db, self.audit)
        self.escalations = Escalations(db, self.requests)
        self.retention = Retention(db, self.audit)
        self.grants = Grants(db, self.audit, self.outbox)

    @classmethod
    async def open(cls, url: str, *, pool_size: int = 5) -> Store:
        """Open the database at `url` and bring its schema to the newest version; on
        PostgreSQL with up to 2 × `pool_size` pooled connections."""
        return cls(await Database.open(url, pool_size=pool_size))

    @property
    def dialect(self) -> str:
        return self.db.dialect

    async def ping(self) -> None:
        await self.db.ping()

    async def close(self) -> None:
        await self.db.close()
