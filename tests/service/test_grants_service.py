"""Grants over a real nats-server, on SQLite and PostgreSQL: issued, used, raced, revoked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg
from typer.testing import CliRunner

from tests.service.helpers import (
    Harness,
    decision,
    propose,
    running_service,
    send_decision,
    unique_prefix,
    wait_until,
)
from workflow.cli import app
from workflow.client.approver import Approver
from workflow.client.transport import ApiRefused
from workflow.client.verify import DigestMismatch
from workflow.controls import GrantChanged
from workflow.eventsig import verify_event
from workflow.messages import ApprovalRecord, InboxItem
from workflow.policy.freeze import FreezeTerms
from workflow.signing import ApproverKey, ServiceKey, verify_record

KEYS = {name: ApproverKey.generate() for name in ("alice", "carol", "mallory")}
POLICY = f"""
[approvers.alice]
key = "{KEYS["alice"].public_key}"
roles = ["approver"]

[approvers.carol]
key = "{KEYS["carol"].public_key}"
roles = ["approver"]
workspaces = ["elsewhere"]

[approvers.mallory]
key = "{KEYS["mallory"].public_key}"
roles = ["approver"]
agents = ["agent-1"]
"""


@asynccontextmanager
async def replicas(
    nats_url: str, tmp_path: Path, database_url: str | None, count: int = 1, **settings: Any
) -> AsyncIterator[list[Harness]]:
    """`count` service replicas sharing one prefix, one database and one service key."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    seed = tmp_path / "service.seed"
    seed.write_bytes(ServiceKey.generate().seed)
    prefix = unique_prefix()
    async with AsyncExitStack() as stack:
        found = [
            await stack.enter_async_context(
                running_service(
                    nats_url,
                    tmp_path / f"r{i}",
                    prefix=prefix,
                    policy_path=policy,
                    database_url=database_url,
                    service_seed=seed,
                    **settings,
                )
            )
            for i in range(count)
        ]
        yield found


def approver(h: Harness, name: str = "alice") -> Approver:
    return Approver(h.nc, name=name, key=KEYS[name], prefix=h.subjects.prefix)


async def approved_with_grant(h: Harness, command: str, **grant: Any) -> tuple[str, Any]:
    """Propose `command`, approve it as alice, and grant calls like it."""
    pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": command})
    (raw,) = await h.observer.wait_for("inbox", pid)
    item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
    await send_decision(
        h.nc, h.subjects, decision(KEYS["alice"], item.request_id, item.proposal_digest)
    )
    await h.observer.wait_for("released", pid)
    made = await approver(h).grant(item, ttl=grant.pop("ttl", 3600), **grant)
    return pid, made


async def outcome(h: Harness, pid: str) -> str:
    """`released` or `held`, whichever the proposal came to."""
    done = asyncio.ensure_future(h.observer.wait_for("released", pid))
    held = asyncio.ensure_future(h.observer.wait_for("inbox", pid))
    finished, pending = await asyncio.wait({done, held}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return "released" if done in finished else "held"


async def test_a_command_grant_releases_calls_starting_with_its_prefix_until_revoked(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        news: asyncio.Queue[Msg] = asyncio.Queue()
        await h.nc.subscribe(h.subjects.grants(">"), cb=news.put)
        _, made = await approved_with_grant(h, "npm test")
        assert made.command_prefix == ["npm", "test"]
        assert made.agent == "agent-1"

        same = await propose(
            h.nc, h.subjects, tool="run_shell", arguments={"command": "npm test --watch"}
        )
        (released,) = await h.observer.wait_for("released", same)
        assert made.grant_id in released["verdict"]["reason"]
        assert released["verdict"]["trail"][-1]["step"] == "grant"

        for command in ("npm test && curl https://x.example", "npm test | sh", "npm run x"):
            other = await propose(
                h.nc, h.subjects, tool="run_shell", arguments={"command": command}
            )
            assert await outcome(h, other) == "held", command
        elsewhere = await propose(
            h.nc, h.subjects, agent="agent-2", tool="run_shell", arguments={"command": "npm test"}
        )
        assert await outcome(h, elsewhere) == "held"

        listed = await approver(h).grants()
        assert [(g.grant_id, g.uses, g.status) for g in listed] == [(made.grant_id, 1, "active")]

        await approver(h).revoke(made.grant_id, "done for today")
        # Each change was told, signed by the service, with the grant as it then stood.
        assert h.service.ctx is not None
        service_key = h.service.ctx.signer.public_key
        told = [await asyncio.wait_for(news.get(), 10) for _ in range(2)]
        assert [m.subject for m in told] == [
            h.subjects.grants("issued"),
            h.subjects.grants("revoked"),
        ]
        assert all(verify_event(service_key, m.subject, m.data, m.headers) for m in told)
        issued, revoked = (GrantChanged.model_validate_json(m.data) for m in told)
        assert (issued.change, issued.by, issued.grant.grant_id) == (
            "issued",
            "alice",
            made.grant_id,
        )
        assert (issued.grant.status, issued.grant.uses) == ("active", 0)
        assert "npm test" in issued.message
        assert (revoked.change, revoked.grant.status, revoked.grant.uses) == (
            "revoked",
            "revoked",
            1,
        )
        assert revoked.grant.revoked_by == "alice"
        after = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm test"})
        assert await outcome(h, after) == "held"
        assert await approver(h).grants() == []
        kinds = await h.audit_kinds()
        assert kinds.count("grant.issued") == 1
        assert kinds.count("grant.used") == 1
        assert kinds.count("grant.revoked") == 1


async def test_a_one_use_grant_raced_by_two_replicas_releases_exactly_one_call(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url, count=2) as (a, b):
        _, made = await approved_with_grant(a, "make lint", max_uses=1)
        # Two agents' connections propose at once; the two replicas share the intake.
        first, second = await nats.connect(nats_url), await nats.connect(nats_url)
        try:
            pids = await asyncio.gather(
                propose(first, a.subjects, tool="run_shell", arguments={"command": "make lint"}),
                propose(second, b.subjects, tool="run_shell", arguments={"command": "make lint"}),
            )
        finally:
            await first.close()
            await second.close()
        outcomes = sorted([await outcome(a, pid) for pid in pids])
        assert outcomes == ["held", "released"]
        (listed,) = await approver(a).grants(every=True)
        assert (listed.grant_id, listed.uses, listed.status) == (made.grant_id, 1, "used_up")
        kinds = await a.audit_kinds()
        assert kinds.count("grant.used") == 1


@pytest.mark.parametrize(
    ("who", "why"),
    [("carol", "may not approve for workspace default"), ("mallory", "runs agent agent-1")],
)
async def test_a_grant_by_a_key_not_allowed_to_approve_the_call_is_refused_and_audited(
    nats_url: str, tmp_path: Path, who: str, why: str
) -> None:
    async with replicas(nats_url, tmp_path, None) as (h,):
        pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm ci"})
        (raw,) = await h.observer.wait_for("inbox", pid)
        item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
        with pytest.raises(ApiRefused, match=why):
            await approver(h, who).grant(item, ttl=600)
        assert await approver(h).grants(every=True) == []
        assert "grant.refused" in await h.audit_kinds()
        again = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm ci"})
        assert await outcome(h, again) == "held"


async def test_a_grant_longer_than_the_policy_allows_or_not_covering_its_call_is_refused(
    nats_url: str, tmp_path: Path
) -> None:
    async with replicas(nats_url, tmp_path, None) as (h,):
        pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm ci"})
        (raw,) = await h.observer.wait_for("inbox", pid)
        item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
        with pytest.raises(ApiRefused, match="longer than the policy allows"):
            await approver(h).grant(item, ttl=9 * 3600)
        with pytest.raises(ApiRefused, match="does not cover the approved call"):
            await approver(h).grant(item, ttl=600, prefix=["npm", "ci", "&&", "x"])
        assert await approver(h).grants(every=True) == []


async def test_freeze_then_thaw_across_two_replicas(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """A freeze ordered on one replica holds, on every replica, what a grant or an allow
    would release (reads flow); a pending request stays pending; the thaw lifts it."""
    async with replicas(nats_url, tmp_path, database_url, count=2) as (a, b):
        await approved_with_grant(a, "npm test")
        waiting = await propose(a.nc, a.subjects, tool="write_file", arguments={"path": "x"})
        (raw,) = await a.observer.wait_for("inbox", waiting)

        reply = await approver(a).freeze(workspace="default", reason="incident 7")
        assert [f.workspace for f in reply.freezes] == ["default"]
        # Proposals from both replicas' connections; the shared intake spreads them.
        calls = [
            await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "npm test"})
            for h in (a, b) * 4
        ]
        reads = [
            await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "README.md"})
            for h in (a, b)
        ]
        assert [await outcome(a, pid) for pid in calls] == ["held"] * len(calls)
        assert [await outcome(a, pid) for pid in reads] == ["released"] * len(reads)

        await send_decision(a.nc, a.subjects, decision(KEYS["alice"], raw["request_id"],
                                                       raw["proposal_digest"]))  # fmt: skip
        history = await wait_until(
            lambda: b.service_history(waiting),
            lambda h: any(e["kind"] == "decision.refused" for e in h["events"]),
        )
        assert history["status"] == "pending"
        assert a.observer.of("released", waiting) == []

        await approver(b).thaw(workspace="default")
        after = await propose(b.nc, b.subjects, tool="run_shell", arguments={"command": "npm test"})
        assert await outcome(a, after) == "released"
        await send_decision(a.nc, a.subjects, decision(KEYS["alice"], raw["request_id"],
                                                       raw["proposal_digest"]))  # fmt: skip
        await a.observer.wait_for("released", waiting)
        kinds = await a.audit_kinds()
        assert kinds.count("freeze") == 1
        assert kinds.count("thaw") == 1
        assert kinds.count("freeze.held") == len(calls)


async def test_a_freeze_of_all_calls_holds_reads_too_and_only_in_its_scope(
    nats_url: str, tmp_path: Path
) -> None:
    async with replicas(nats_url, tmp_path, None) as (h,):
        await approver(h).freeze(agent="agent-1", all_calls=True)
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        assert await outcome(h, read) == "held"
        other = await propose(h.nc, h.subjects, agent="agent-2", tool="read_file",
                              arguments={"path": "a"})  # fmt: skip
        assert await outcome(h, other) == "released"
        with pytest.raises(ApiRefused, match="may not freeze every workspace"):
            await approver(h, "carol").freeze(reason="not hers to freeze")


async def test_a_freeze_another_replica_wrote_holds_the_next_batch_of_an_intake_that_knew_none(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """The intake decides on the freezes it last read and its commit checks them: a freeze
    written to the database by anyone (here straight into the store, as another replica's
    API would; this process hears nothing of it) holds the very next batch."""
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        ctx = h.service.ctx
        assert ctx is not None
        first = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        assert await outcome(h, first) == "released"  # decided on "no freeze", and kept
        terms = FreezeTerms("fz_elsewhere", "agent-1", None, True, "incident", "alice", ctx.now())
        await ctx.store.grants.freeze(terms, [], ctx.now())
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "b"})
        assert await outcome(h, read) == "held"
        await ctx.store.grants.thaw("agent-1", None, "alice", [], ctx.now())
        again = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "c"})
        assert await outcome(h, again) == "released"
        assert "freeze.held" in await h.audit_kinds()


async def given_back_then_used(
    h: Harness, made: Any, thaw: Callable[[], Awaitable[object]]
) -> None:
    """The grant's use was given back: still active with none used; once `thaw` has lifted
    the freezes, it releases the next call like it and is used up."""
    (listed,) = await approver(h).grants(every=True)
    assert (listed.grant_id, listed.uses, listed.status) == (made.grant_id, 0, "active")
    await thaw()
    after = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "make lint"})
    (released,) = await h.observer.wait_for("released", after)
    assert made.grant_id in released["verdict"]["reason"]
    (listed,) = await approver(h).grants(every=True)
    assert (listed.uses, listed.status) == (1, "used_up")


async def test_a_grant_use_claimed_before_a_freeze_held_the_call_is_given_back(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    """A batch decided on the freezes its intake last read (none) claims a grant's last use
    for a call; its commit finds a freeze in force (written straight into the store, as
    another replica's API would), and the batch decided again holds the call. The use is
    given back: the grant releases the next call like it once the freeze is lifted."""
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        ctx = h.service.ctx
        assert ctx is not None
        _, made = await approved_with_grant(h, "make lint", max_uses=1)
        terms = FreezeTerms("fz_agent", "agent-1", None, True, "incident", "alice", ctx.now())
        await ctx.store.grants.freeze(terms, [], ctx.now())
        frozen = await propose(
            h.nc, h.subjects, tool="run_shell", arguments={"command": "make lint"}
        )
        assert await outcome(h, frozen) == "held"
        await given_back_then_used(
            h, made, lambda: ctx.store.grants.thaw("agent-1", None, "alice", [], ctx.now())
        )
        kinds = await h.audit_kinds()
        assert kinds.count("grant.used") == 1
        assert "freeze.held" in kinds


async def test_a_grant_use_an_earlier_delivery_claimed_is_given_back_when_a_freeze_holds_it(
    nats_url: str, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The freezes change twice while one batch is decided: the first decision claims a
    grant's last use, its commit meets a freeze, the batch decided again on it meets a second
    one (written, as another replica's API would, just after the intake read the first), and
    the batch is retried with nothing stored. The redelivered call is held by the freezes;
    the use its first delivery claimed is given back, and once thawed the grant releases the
    next call like it."""
    async with replicas(nats_url, tmp_path, database_url, retry_base_delay=0.1) as (h,):
        ctx = h.service.ctx
        assert ctx is not None
        store = ctx.store.grants
        _, made = await approved_with_grant(h, "make lint", max_uses=1)
        first = FreezeTerms("fz_agent", "agent-1", None, True, "incident", "alice", ctx.now())
        second = FreezeTerms("fz_ws", None, "default", True, "incident", "alice", ctx.now())
        await store.freeze(first, [], ctx.now())
        read_freezes = store.freezes
        reads = 0

        async def freezes_then_another() -> list[FreezeTerms]:
            nonlocal reads
            reads += 1
            known = await read_freezes()
            if reads == 1:  # the batch decided again: another freeze lands before its commit
                await store.freeze(second, [], ctx.now())
            return known

        monkeypatch.setattr(store, "freezes", freezes_then_another)
        frozen = await propose(
            h.nc, h.subjects, tool="run_shell", arguments={"command": "make lint"}
        )
        assert await outcome(h, frozen) == "held"
        assert reads >= 2  # decided again once, then redelivered and decided on both

        async def thaw_both() -> None:
            await store.thaw("agent-1", None, "alice", [], ctx.now())
            await store.thaw(None, "default", "alice", [], ctx.now())

        await given_back_then_used(h, made, thaw_both)


async def held_items(h: Harness, count: int, **propose_args: Any) -> list[InboxItem]:
    pids = [
        await propose(
            h.nc, h.subjects, tool="write_file", arguments={"path": f"f{i}.txt"}, **propose_args
        )
        for i in range(count)
    ]
    items = []
    for pid in pids:
        (raw,) = await h.observer.wait_for("inbox", pid)
        items.append(InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"}))
    return items


async def test_batch_approval_of_20_requests_releases_20_and_a_tampered_list_none(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        items = await held_items(h, 20)
        forged = items[7].proposal.model_copy(update={"arguments": {"path": "/etc/passwd"}})
        tampered = [*items[:7], items[7].model_copy(update={"proposal": forged}), *items[8:]]
        with pytest.raises(DigestMismatch):
            await approver(h).approve_all(tampered)
        for item in items:  # nothing was signed, so nothing changed
            history = await h.service_history(item.request_id)
            assert history["status"] == "pending"
            assert history["approvals"] == []

        results = await approver(h).approve_all(items, "batch")
        assert [r.accepted for r in results] == [True] * 20
        for item in items:
            await h.observer.wait_for("released", item.proposal_id)


async def test_the_cli_grants_lists_approves_in_batch_and_freezes(
    nats_url: str, tmp_path: Path
) -> None:
    seed = tmp_path / "alice.seed"
    KEYS["alice"].write(seed)
    async with replicas(nats_url, tmp_path, None) as (h,):
        common = ["--nats-url", nats_url, "--prefix", h.subjects.prefix,
                  "--data-dir", str(h.data_dir)]  # fmt: skip
        signed_as = ["--key", str(seed), "--approver", "alice"]

        async def cli(*args: str) -> Any:
            return await asyncio.to_thread(CliRunner().invoke, app, [*args, *common])

        pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "make x"})
        (raw,) = await h.observer.wait_for("inbox", pid)
        out = await cli("approve", raw["request_id"], "--grant", "1h", *signed_as)
        assert out.exit_code == 0, out.output
        assert "granted:" in out.output
        listed = await cli("grants", "list", "--json")
        (grant,) = json.loads(listed.output)
        assert grant["command_prefix"] == ["make", "x"]
        assert (await cli("approve", raw["request_id"], "--grant", "soon")).exit_code == 2
        later = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "make q"})
        (held,) = await h.observer.wait_for("inbox", later)
        out = await cli("approve", held["request_id"], "--grant", "9h", *signed_as)
        assert out.exit_code == 1  # the approval stands, the grant is refused
        assert "accepted:" in out.output
        assert "grant refused:" in out.output
        await h.observer.wait_for("released", later)

        items = await held_items(h, 3, agent="agent-9")
        out = await cli("approve", "--all", "--agent", "agent-9", "--tool", "write_file",
                        "--yes", *signed_as)  # fmt: skip
        assert out.exit_code == 0, out.output
        for item in items:
            await h.observer.wait_for("released", item.proposal_id)
        assert (await cli("approve", "--all", "--yes", *signed_as)).exit_code == 2  # no filter

        ours = await held_items(h, 2, agent="agent-8", context={"session_id": "s1"})
        (theirs,) = await held_items(h, 1, agent="agent-8", context={"session_id": "s2"})
        out = await cli("approve", "--all", "--session", "s1", "--yes", *signed_as)
        assert out.exit_code == 0, out.output
        for item in ours:
            await h.observer.wait_for("released", item.proposal_id)
        assert (await h.service_history(theirs.proposal_id))["status"] == "pending"

        out = await cli("freeze", "--workspace", "default", "--reason", "drill", *signed_as)
        assert out.exit_code == 0, out.output
        assert "Frozen" in out.output
        out = await cli("thaw", "--workspace", "default", *signed_as)
        assert "Thawed 1" in out.output
        out = await cli("grants", "revoke", grant["grant_id"], *signed_as)
        assert out.exit_code == 0, out.output

        pid = await propose(h.nc, h.subjects, tool="run_shell", arguments={"command": "make z"})
        (raw,) = await h.observer.wait_for("inbox", pid)
        out = await cli("approve", raw["request_id"], "--edit", '{"command": "make z-dry"}',
                        *signed_as)  # fmt: skip
        assert out.exit_code == 0, out.output
        (released,) = await h.observer.wait_for("released", pid)
        assert released["arguments"] == {"command": "make z-dry"}
        assert (await cli("approve", raw["request_id"], "--edit", "[1]")).exit_code == 2


async def test_an_edited_call_is_evaluated_released_with_its_arguments_and_audited_twice(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        pid = await propose(h.nc, h.subjects, tool="run_shell",
                            arguments={"command": "make deploy-all"})  # fmt: skip
        (raw,) = await h.observer.wait_for("inbox", pid)
        item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})

        denied = await approver(h).approve_edited(item, {"command": "rm -rf /"})
        assert denied.accepted is False
        assert "denies the edited call" in denied.message
        assert (await h.service_history(pid))["status"] == "pending"

        result = await approver(h).approve_edited(item, {"command": "make deploy-staging"})
        assert result.accepted, result.message
        (released,) = await h.observer.wait_for("released", pid)
        assert released["arguments"] == {"command": "make deploy-staging"}
        assert released["edited_from"] == item.proposal_digest
        edited = item.proposal.model_copy(update={"arguments": released["arguments"]})
        assert released["proposal_digest"] == edited.digest() != item.proposal_digest
        (record,) = [ApprovalRecord.model_validate(a) for a in released["approvals"]]
        assert verify_record(record)
        assert json.loads(record.signed)["proposal_digest"] == released["proposal_digest"]
        assert "decision.edited" in await h.audit_kinds()
        history = await h.service_history(pid)
        assert history["proposal"]["arguments"] == {"command": "make deploy-all"}  # as proposed


async def test_a_grant_limited_to_a_session_releases_only_that_sessions_calls(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        context = {"session_id": "s1"}
        pid = await propose(h.nc, h.subjects, tool="run_shell",
                            arguments={"command": "npm test"}, context=context)  # fmt: skip
        (raw,) = await h.observer.wait_for("inbox", pid)
        item = InboxItem.model_validate({k: v for k, v in raw.items() if k != "_subject"})
        made = await approver(h).grant(item, ttl=600, this_session=True)
        assert made.session_id == "s1"
        same = await propose(h.nc, h.subjects, tool="run_shell",
                             arguments={"command": "npm test"}, context=context)  # fmt: skip
        other = await propose(h.nc, h.subjects, tool="run_shell",
                              arguments={"command": "npm test"},
                              context={"session_id": "s2"})  # fmt: skip
        assert await outcome(h, same) == "released"
        assert await outcome(h, other) == "held"


async def test_the_api_backtests_a_policy_over_the_services_store(
    nats_url: str, tmp_path: Path, database_url: str
) -> None:
    async with replicas(nats_url, tmp_path, database_url) as (h,):
        held = [
            await propose(
                h.nc, h.subjects, tool="write_file", arguments={"path": f"{i}.txt"}, workspace=ws
            )
            for i, ws in enumerate(["prod", "prod", "default"])
        ]
        read = await propose(h.nc, h.subjects, tool="read_file", arguments={"path": "a"})
        for pid in held:
            await h.observer.wait_for("inbox", pid)
        await h.observer.wait_for("released", read)
        new = '[workspaces.prod.classes.write_local]\ndecision = "deny"\n'
        report = await approver(h).backtest(new, since=3600, examples=1)
        assert report["proposals"] == 4
        assert report["changes"] == [{"from": "require_approval", "to": "deny", "count": 2}]
        assert report["tools"] == {"write_file": 2}
        (example,) = report["examples"]
        assert len(example["calls"]) == 1
        with pytest.raises(ApiRefused, match="The policy is not valid"):
            await approver(h).backtest("[classes.exec]\ndecision = 'sometimes'\n")
