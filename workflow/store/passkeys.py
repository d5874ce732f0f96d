"""Approvers' passkeys and the one-time invitations that register them.

Only public keys are stored. An invitation is kept as the hash of its token, used at most once
(the update that uses it is conditional on it being unused and unexpired), and every
invitation and registration is an audit record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, func, select, update

from workflow.effects import AuditEntry
from workflow.store.audit import AuditLog
from workflow.store.engine import Database
from workflow.store.tables import INVITES, PASSKEYS


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class StoredPasskey:
    credential_id: str
    approver: str
    public_key: str
    rp_id: str
    sign_count: int
    label: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Invitation:
    approver: str
    expires_at: datetime
    created_by: str


class PasskeyTaken(Exception):
    """The credential is registered already (to someone, maybe the same approver)."""


class Passkeys:
    def __init__(self, db: Database, audit: AuditLog):
        self.db = db
        self.audit = audit

    async def invite(
        self,
        token: str,
        *,
        approver: str,
        created_by: str,
        nonce: str,
        expires_at: datetime,
        now: datetime,
    ) -> bool:
        """Record an invitation; False when the request's nonce was used before (a replay)."""
        seen = select(INVITES.c.nonce).where(INVITES.c.nonce == nonce)

        def body(conn: Connection) -> bool:
            if conn.execute(seen).first() is not None:
                return False
            conn.execute(
                INVITES.insert().values(
                    token_hash=token_hash(token), nonce=nonce, approver=approver,
                    created_by=created_by, created_at=now, expires_at=expires_at,
                )
            )  # fmt: skip
            self.audit.append_in(
                conn,
                [
                    AuditEntry(
                        "web.invited",
                        created_by,
                        {"approver": approver, "expires_at": expires_at.isoformat()},
                    )
                ],
                now,
            )
            return True

        return await self.db.transact(body)

    async def invitation(self, token: str, now: datetime) -> Invitation | None:
        """The invitation behind `token` while it is unused and unexpired."""
        query = select(INVITES.c.approver, INVITES.c.expires_at, INVITES.c.created_by).where(
            INVITES.c.token_hash == token_hash(token),
            INVITES.c.used_at.is_(None),
            INVITES.c.expires_at > now,
        )

        def body(conn: Connection) -> Invitation | None:
            row = conn.execute(query).first()
            return Invitation(row[0], row[1], row[2]) if row is not None else None

        return await self.db.read(body)

    async def register(
        self,
        token: str,
        *,
        credential_id: str,
        public_key: str,
        rp_id: str,
        sign_count: int,
        label: str,
        now: datetime,
    ) -> str | None:
        """Use the invitation and store the passkey, in one transaction; the approver's name,
        or None when the invitation is used, expired or unknown. PasskeyTaken when the
        credential is registered already."""
        digest = token_hash(token)
        use = (
            update(INVITES)
            .where(
                and_(
                    INVITES.c.token_hash == digest,
                    INVITES.c.used_at.is_(None),
                    INVITES.c.expires_at > now,
                )
            )
            .values(used_at=now, credential_id=credential_id)
        )
        taken = select(PASSKEYS.c.approver).where(PASSKEYS.c.credential_id == credential_id)
        who = select(INVITES.c.approver, INVITES.c.created_by).where(INVITES.c.token_hash == digest)

        def body(conn: Connection) -> str | None:
            if conn.execute(taken).first() is not None:
                raise PasskeyTaken(credential_id)
            if conn.execute(use).rowcount != 1:
                return None
            approver, invited_by = conn.execute(who).one()
            conn.execute(
                PASSKEYS.insert().values(
                    credential_id=credential_id, approver=approver, public_key=public_key,
                    rp_id=rp_id, sign_count=sign_count, label=label[:200], created_at=now,
                )
            )  # fmt: skip
            self.audit.append_in(
                conn,
                [
                    AuditEntry(
                        "passkey.registered",
                        str(approver),
                        {
                            "credential_id": credential_id,
                            "public_key": public_key,
                            "rp_id": rp_id,
                            "label": label[:200],
                            "invited_by": invited_by,
                        },
                    )
                ],
                now,
            )
            return str(approver)

        return await self.db.transact(body)

    async def get(self, credential_id: str) -> StoredPasskey | None:
        query = select(PASSKEYS).where(PASSKEYS.c.credential_id == credential_id)

        def body(conn: Connection) -> StoredPasskey | None:
            row = conn.execute(query).first()
            return _passkey(row) if row is not None else None

        return await self.db.read(body)

    async def of(self, approver: str) -> list[str]:
        """The credential ids of an approver's passkeys, oldest first."""
        query = (
            select(PASSKEYS.c.credential_id)
            .where(PASSKEYS.c.approver == approver)
            .order_by(PASSKEYS.c.created_at)
        )
        return await self.db.read(lambda conn: [str(r[0]) for r in conn.execute(query)])

    async def owners(self, credential_ids: Iterable[str]) -> dict[str, str]:
        ids = sorted(set(credential_ids))
        if not ids:
            return {}
        query = select(PASSKEYS.c.credential_id, PASSKEYS.c.approver).where(
            PASSKEYS.c.credential_id.in_(ids)
        )
        return await self.db.read(lambda conn: {str(r[0]): str(r[1]) for r in conn.execute(query)})

    async def used(self, credential_id: str, sign_count: int, now: datetime) -> None:
        """Remember a verified use: the counter only moves forward (an older count arriving
        late from another replica changes nothing)."""
        statement = (
            update(PASSKEYS)
            .where(PASSKEYS.c.credential_id == credential_id)
            .values(
                sign_count=func.max(PASSKEYS.c.sign_count, sign_count)
                if self.db.dialect == "sqlite"
                else func.greatest(PASSKEYS.c.sign_count, sign_count),
                last_used_at=now,
            )
        )

        def body(conn: Connection) -> None:
            conn.execute(statement)

        await self.db.transact(body)


def _passkey(row: Any) -> StoredPasskey:
    return StoredPasskey(
        credential_id=row.credential_id, approver=row.approver, public_key=row.public_key,
        rp_id=row.rp_id, sign_count=int(row.sign_count), label=row.label,
        created_at=row.created_at,
    )  # fmt: skip
