"""Grant uses in the store: claimed atomically across connections, once per proposal."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from tests.policy.test_backtest import _history
from tests.store.test_repo import record
from workflow.store.repo import Store

NOW = datetime.now(UTC)


def grant_row(grant_id: str = "gr_1", max_uses: int | None = 1) -> dict[str, object]:
    return {
        "grant_id": grant_id, "nonce": f"n-{grant_id}", "request_id": "rq_x", "approver": "alice",
        "key": "U" + "A" * 55, "tool": "run_shell", "workspace": "default", "agent": None,
        "session_id": None, "scope": "command-prefix", "command_prefix": json.dumps(["make"]),
        "path_glob": None, "max_uses": max_uses, "uses": 0, "signed": "{}", "signature": "s",
        "issued_at": NOW, "expires_at": NOW + timedelta(hours=1),
    }  # fmt: skip


async def test_a_one_use_grant_claimed_from_two_connections_is_used_once(
    database_url: str,
) -> None:
    first, second = await Store.open(database_url), await Store.open(database_url)
    try:
        assert await first.grants.issue(grant_row(), [], NOW)
        claims = await asyncio.gather(
            *(store.grants.claim("gr_1", f"p-{i}", NOW) for i, store in
              enumerate([first, second] * 4))
        )  # fmt: skip
        assert sorted(claims) == [False] * 7 + [True]
        (info,) = await first.grants.listed(NOW, every=True)
        assert (info.uses, info.status) == (1, "used_up")
    finally:
        await first.close()
        await second.close()


async def test_a_redelivered_proposal_reuses_its_use_and_a_decided_one_takes_none(
    database_url: str,
) -> None:
    store = await _history(database_url, 1)  # proposal p000, stored without a grant
    try:
        assert await store.grants.issue(grant_row(max_uses=5), [], NOW)
        assert not await store.grants.claim("gr_1", "p000", NOW)
        assert await store.grants.claim("gr_1", "p-new", NOW)
        assert await store.grants.claim("gr_1", "p-new", NOW)  # delivered again
        (info,) = await store.grants.listed(NOW)
        assert info.uses == 1
        assert await store.grants.revoke("gr_1", "alice", [], NOW)
        assert not await store.grants.claim("gr_1", "p-later", NOW)
    finally:
        await store.close()


async def test_a_use_is_given_back_only_for_a_call_stored_as_not_released(
    database_url: str,
) -> None:
    """Whichever grant the use was claimed from: a proposal has one use at most."""
    store = await Store.open(database_url)
    try:
        assert await store.grants.issue(grant_row(max_uses=5), [], NOW)
        assert await store.grants.issue(grant_row(grant_id="gr_2", max_uses=5), [], NOW)
        assert await store.grants.claim("gr_2", "held", NOW)
        for pid in ("read", "absent"):
            assert await store.grants.claim("gr_1", pid, NOW)
        # Stored: "held" held for approval (a freeze held it), "read" released.
        await store.proposals.record([record("held"), record("read", "read_file")], NOW)
        proposals = ["held", "read", "absent"]
        assert await store.grants.give_back(proposals) == 1
        uses = {info.grant_id: info.uses for info in await store.grants.listed(NOW)}
        # "read" may be what its grant released; "absent" is not decided yet
        assert uses == {"gr_1": 2, "gr_2": 0}
        assert await store.grants.give_back(proposals) == 0  # given back once
        assert not await store.grants.claim("gr_2", "held", NOW)  # stored without a grant
        assert await store.grants.claim("gr_1", "absent", NOW)  # still its own use
        uses = {info.grant_id: info.uses for info in await store.grants.listed(NOW)}
        assert uses == {"gr_1": 2, "gr_2": 0}
    finally:
        await store.close()
