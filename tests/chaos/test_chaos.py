"""Chaos: real processes killed while a load runs; then the guarantees are checked.

Against a 3-node NATS cluster (from deploy/) and 2 Headgate replicas on PostgreSQL, over a
thousand proposals (reads, approvable writes, denied calls, duplicates and a few malformed
inputs) with a bot approving or rejecting, while each replica is SIGKILLed and restarted and one
NATS node is SIGKILLed and restarted. A smaller variant runs on SQLite with one replica and a
single nats-server. At the end: exactly one terminal outcome per proposal, at most one release
event per proposal in the stream, every released write carries a verified approval, the audit
chain verifies, and the dead-letter stream holds only the malformed inputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from sqlalchemy import select

from tests.support.natsproc import Servers, free_ports, start_cluster
from workflow.messages import ApprovalDecision, ApprovalRecord, DecisionVerdict
from workflow.service.embedded import EmbeddedNats
from workflow.signing import ApproverKey, ServiceKey, verify_record
from workflow.store.repo import Store
from workflow.store.tables import OUTCOMES, PROPOSALS
from workflow.subjects import Subjects

pytestmark = pytest.mark.slow

SUBJECTS = Subjects("headgate")
SERVICE_AUTH = {"user": "headgate", "password": "headgate-dev-password"}
MALFORMED = [
    b"{not json",
    b'{"id": "m-1", "agent": "chaos", "arguments": {}}',
    b'{"id": "m-2", "agent": "chaos", "tool": "read_file", "colour": "red"}',
    b'{"id": "m-3", "agent": "impostor", "tool": "read_file"}',
    b"\xff\xfe binary",
]


def _readable_ids(payloads: list[bytes]) -> set[str]:
    """The proposal ids of the malformed inputs that carry one."""
    ids = set()
    for payload in payloads:
        try:
            body = json.loads(payload)
        except ValueError:
            continue
        if isinstance(body, dict) and isinstance(body.get("id"), str):
            ids.add(body["id"])
    return ids


def policy_text(bot: ApproverKey) -> str:
    return f"""
default_ttl = "1h"

[approvers.bot]
key = "{bot.public_key}"
roles = ["approver"]
"""


@dataclass
class Replica:
    """A `headgate serve` process."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    metrics_port: int
    process: subprocess.Popen[bytes] | None = None
    kills: int = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "workflow", "serve", *self.args,
                 "--metrics-port", str(self.metrics_port), "--log-level", "info"],
                env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.kills += 1

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def readyz(self) -> str:
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as r:
                return str(r.read().decode())
        except urllib.error.HTTPError as exc:
            return f"{exc.code} {exc.read().decode()}"
        except OSError as exc:
            return str(exc)

    def ready(self) -> bool:
        return '"service": "ok", "nats": "ok", "database": "ok", "streams": "ok"' in self.readyz()


@dataclass
class Load:
    """What the driver published and what it expects."""

    valid: dict[str, str] = field(default_factory=dict)  # proposal id -> tool
    duplicates: int = 0
    malformed: int = 0


MIX = ["read_file"] * 6 + ["write_file"] * 3 + ["delete_file"]


def tool_for(i: int) -> str:
    return MIX[i % len(MIX)]


def approves(pid: str) -> bool:
    return int(hashlib.sha256(pid.encode()).hexdigest(), 16) % 5 != 0


async def connect(urls: list[str], auth: dict[str, str] | None) -> NATS:
    return await nats.connect(
        servers=urls, connect_timeout=3, max_reconnect_attempts=-1, reconnect_time_wait=0.2,
        **(auth or {}),
    )  # fmt: skip


async def publish_retrying(nc: NATS, subject: str, data: bytes, msg_id: str | None) -> None:
    """Retry a publish with the same message id until JetStream confirms it."""
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    for _ in range(200):
        try:
            await nc.jetstream(timeout=3).publish(subject, data, headers=headers)
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise AssertionError(f"could not publish to {subject}")


async def drive_load(nc: NATS, count: int, rate: float) -> Load:
    load = Load()
    pids: list[str] = []
    for i in range(count):
        pid = f"c-{i:05d}-{uuid.uuid4().hex[:6]}"
        tool = tool_for(i)
        body = {"id": pid, "agent": "chaos", "tool": tool, "arguments": {"path": f"f{i}.txt"}}
        await publish_retrying(nc, SUBJECTS.proposals("chaos"), json.dumps(body).encode(), pid)
        load.valid[pid] = tool
        pids.append(pid)
        if i % 20 == 19:  # the same proposal again under another message id: reaches the service
            dup = pids[i - 7]
            again = {"id": dup, "agent": "chaos", "tool": load.valid[dup],
                     "arguments": {"path": f"f{i - 7}.txt"}}  # fmt: skip
            await publish_retrying(
                nc, SUBJECTS.proposals("chaos"), json.dumps(again).encode(), f"dup-{dup}"
            )
            load.duplicates += 1
        if i % (count // len(MALFORMED)) == 3 and load.malformed < len(MALFORMED):
            bad = MALFORMED[load.malformed]
            subject = SUBJECTS.proposals("chaos")
            await publish_retrying(nc, subject, bad, f"bad-{load.malformed}")
            load.malformed += 1
        await asyncio.sleep(1 / rate)
    return load


async def approver_bot(nc: NATS, bot: ApproverKey, stop: asyncio.Event) -> Counter[str]:
    """Answers every inbox item from a durable consumer: approve most, reject some."""
    done: Counter[str] = Counter()
    js = nc.jetstream(timeout=5)
    sub = None
    while sub is None:
        try:
            sub = await js.pull_subscribe(
                SUBJECTS.inbox(">"), durable="approver-bot", stream=SUBJECTS.stream("inbox"),
                config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30),
            )  # fmt: skip
        except Exception:
            await asyncio.sleep(0.2)
    while not stop.is_set():
        try:
            msgs = await sub.fetch(50, timeout=0.5)
        except Exception:
            continue
        for msg in msgs:
            item = json.loads(msg.data)
            verdict = DecisionVerdict.APPROVE if approves(item["proposal_id"]) else "reject"
            decision = bot.sign_decision(
                ApprovalDecision(
                    request_id=item["request_id"], proposal_digest=item["proposal_digest"],
                    verdict=DecisionVerdict(verdict), approver="bot", nonce=uuid.uuid4().hex,
                    issued_at=datetime.now(UTC), reason="chaos bot",
                )
            )  # fmt: skip
            await publish_retrying(
                nc, SUBJECTS.decisions(item["request_id"]), decision.model_dump_json().encode(),
                f"decision:{item['request_id']}",
            )  # fmt: skip
            with contextlib.suppress(Exception):
                await msg.ack()
            done[str(verdict)] += 1
    return done


async def stream_bodies(
    nc: NATS, stream: str, subject: str, patience: float = 30.0
) -> list[dict[str, Any]]:
    """Every message the stream holds. Right after the cluster's chaos a new consumer's first
    fetches may time out while its replicas settle: they are retried for up to `patience`
    seconds before the messages read so far are returned."""
    js = nc.jetstream(timeout=10)
    info = await js.stream_info(stream)
    total = info.state.messages
    sub = await js.pull_subscribe(
        subject, stream=stream,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE),
    )  # fmt: skip
    out: list[dict[str, Any]] = []
    deadline = asyncio.get_running_loop().time() + patience
    while len(out) < total:
        try:
            msgs = await sub.fetch(500, timeout=2)
        except nats.errors.TimeoutError:
            if asyncio.get_running_loop().time() > deadline:
                break
            continue
        for m in msgs:
            try:
                body = json.loads(m.data)
            except ValueError:
                body = {}
            out.append({"_subject": m.subject, **body})
    await sub.unsubscribe()
    return out


async def wait_for_outcomes(store: Store, expected: int, timeout: float) -> int:
    deadline = asyncio.get_running_loop().time() + timeout
    done = 0
    while asyncio.get_running_loop().time() < deadline:
        async with store.db.engine.connect() as conn:
            from sqlalchemy import func, select

            from workflow.store.tables import OUTCOMES

            done = int(
                (await conn.execute(select(func.count()).select_from(OUTCOMES))).scalar_one()
            )
        if done >= expected:
            return done
        await asyncio.sleep(0.5)
    return done


async def check_guarantees(
    nc: NATS, store: Store, load: Load, bot: ApproverKey, label: str, logs: list[Path]
) -> dict[str, int]:
    # One terminal outcome per proposal (the outcome table's key), none missing, none extra.
    async with store.db.engine.connect() as conn:
        outcomes = {r.proposal_id: r.outcome for r in await conn.execute(select(OUTCOMES))}
        statuses = Counter(r.status for r in await conn.execute(select(PROPOSALS.c.status)))
    assert set(outcomes) == set(load.valid), "every proposal has exactly one terminal outcome"
    assert statuses["pending"] == 0

    # An outcome committed just before a crash or a NATS outage reaches the results stream
    # later: by redelivery (after the ack wait, `ACK_WAIT`) or by the outbox republisher (rows
    # older than 10 s, every 5 s). So does the answer to a malformed input a killed replica had
    # in hand, and its dead letter (redelivery). Wait for that bound, then check the streams
    # hold exactly one each.
    readable = _readable_ids(MALFORMED[: load.malformed])
    deadline = asyncio.get_running_loop().time() + 45
    while True:
        results = await stream_bodies(nc, SUBJECTS.stream("results"), "headgate.>")
        seen = {b["proposal_id"] for b in results if ".released." in b["_subject"]}
        seen |= {b["proposal_id"] for b in results if ".blocked." in b["_subject"]}
        dead_letters = (await nc.jetstream().stream_info(SUBJECTS.stream("dead"))).state.messages
        if (
            seen >= set(load.valid) | readable and dead_letters >= load.malformed
        ) or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(1.0)
    released = Counter(b["proposal_id"] for b in results if ".released." in b["_subject"])
    blocked = Counter(
        b["proposal_id"]
        for b in results
        if ".blocked." in b["_subject"] and b["outcome"] != "invalid"
    )
    # A malformed input whose id can be read is answered (`invalid`), once per input.
    invalid = Counter(
        b["proposal_id"]
        for b in results
        if ".blocked." in b["_subject"] and b["outcome"] == "invalid"
    )
    assert set(invalid) == readable
    assert max(invalid.values(), default=1) == 1
    assert max(released.values()) == 1, "a proposal was released twice"
    assert max(blocked.values()) == 1
    assert not set(released) & set(blocked)
    missing = set(load.valid) - set(released) - set(blocked)
    assert not missing, await _missing_events(nc, missing, outcomes, logs)
    assert set(released) | set(blocked) == set(load.valid)
    for pid, outcome in outcomes.items():
        assert (pid in released) == (outcome == "released"), pid

    by_tool = Counter(load.valid[pid] for pid in released)
    assert by_tool["delete_file"] == 0
    for body in results:
        if ".released." in body["_subject"] and body["tool"] == "write_file":
            approvals = [ApprovalRecord.model_validate(a) for a in body["approvals"]]
            assert approvals, f"{body['proposal_id']} was released without approvals"
            assert all(verify_record(a) and a.key == bot.public_key for a in approvals)
            assert approves(body["proposal_id"])

    chain = await store.audit.verify()
    assert chain.ok, chain.problem

    dead = await stream_bodies(nc, SUBJECTS.stream("dead"), "headgate.>")
    stored = (await nc.jetstream().stream_info(SUBJECTS.stream("dead"))).state.messages
    assert len(dead) == load.malformed, (f"{stored} stored", [d.get("error") for d in dead])
    payloads = {d["payload"] for d in dead}
    assert "{not json" in payloads
    counts = {
        "proposals": len(load.valid),
        "duplicates published": load.duplicates,
        "malformed (dead letters)": len(dead),
        "released": len(released),
        "blocked": len(blocked),
        "released writes": by_tool["write_file"],
        "audit records": chain.checked,
    }
    counts.update({f"outcome {k}": v for k, v in Counter(outcomes.values()).items()})
    print(f"\nchaos ({label}):", json.dumps(counts))
    return counts


async def _missing_events(
    nc: NATS, missing: set[str], outcomes: dict[str, str], logs: list[Path]
) -> str:
    """What a failure needs to be understood: the outcomes recorded for the proposals whose
    event the results stream lacks, the stream's state, and the replicas' warnings."""
    state = (await nc.jetstream().stream_info(SUBJECTS.stream("results"))).state
    warnings = [
        f"{log.name}: {line}"
        for log in logs
        if log.exists()
        for line in log.read_text(errors="replace").splitlines()
        if "WARNING" in line or "ERROR" in line or any(pid in line for pid in missing)
    ]
    return "\n".join(
        [
            f"no event in the results stream for {sorted(missing)}",
            f"their recorded outcomes: {[outcomes.get(pid) for pid in sorted(missing)]}",
            f"results stream: {state.messages} messages, seq {state.first_seq}-{state.last_seq}",
            "replica warnings:",
            *warnings[-40:],
        ]
    )


@pytest.fixture
def servers() -> Iterator[Servers]:
    started = Servers()
    try:
        yield started
    finally:
        started.stop_all()


def replica_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    env["HEADGATE_CONNECT_TIMEOUT"] = "60"
    return env


async def wait_ready(replicas: list[Replica], timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not all(await asyncio.gather(*(asyncio.to_thread(r.ready) for r in replicas))):
        for r in replicas:
            assert r.process is not None
            assert r.process.poll() is None, r.log.read_text()[-3000:]
        if asyncio.get_running_loop().time() > deadline:
            report = "\n".join(
                f"--- {r.name}: /readyz {r.readyz()}\n{r.log.read_text()[-2500:]}" for r in replicas
            )
            raise AssertionError(f"replicas not ready within {timeout:.0f}s:\n{report}")
        await asyncio.sleep(0.2)


async def test_chaos_on_a_nats_cluster_with_two_replicas_on_postgresql(
    tmp_path: Path, servers: Servers, postgres_url: str
) -> None:
    database_url = postgres_url
    nodes = start_cluster(tmp_path / "cluster", servers)
    urls = [n.url for n in nodes]
    bot = ApproverKey.generate()
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text(bot))
    seed = tmp_path / "service.seed"
    seed.write_bytes(ServiceKey.generate().seed)
    ports = free_ports(2)
    replicas = [
        Replica(
            f"replica-{i}",
            [
                "--nats-url",
                ",".join(urls),
                "--database-url",
                database_url,
                "--policy",
                str(policy),
                "--data-dir",
                str(tmp_path / f"data-{i}"),
                "--service-seed",  # replicas sign with one key: clients trust that one
                str(seed),
                "--replicas",
                "3",
                "--nats-user",
                "headgate",
                "--nats-password",
                "headgate-dev-password",
            ],
            replica_env(),
            tmp_path / f"replica-{i}.log",
            ports[i],
        )
        for i in range(2)
    ]
    store = await Store.open(database_url)
    nc = await connect(urls, SERVICE_AUTH)
    stop_bot = asyncio.Event()
    try:
        for r in replicas:
            r.start()
        await wait_ready(replicas)
        bot_task = asyncio.create_task(approver_bot(nc, bot, stop_bot))

        async def chaos() -> None:
            await asyncio.sleep(1.5)
            replicas[0].kill()
            await asyncio.sleep(1.5)
            replicas[0].start()
            await asyncio.sleep(1.5)
            replicas[1].kill()
            await asyncio.sleep(1.5)
            replicas[1].start()
            await asyncio.sleep(1.0)
            nodes[1].process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            nodes[1].process.wait()  # type: ignore[union-attr]
            await asyncio.sleep(3.0)
            nodes[1].start()
            await asyncio.sleep(1.5)
            replicas[0].kill()
            await asyncio.sleep(1.0)
            replicas[0].start()

        load, _ = await asyncio.gather(drive_load(nc, 1000, rate=90), chaos())
        done = await wait_for_outcomes(store, len(load.valid), timeout=180)
        assert done == len(load.valid), f"{done} of {len(load.valid)} proposals finished"
        stop_bot.set()
        answered = await bot_task
        counts = await check_guarantees(
            nc, store, load, bot, "3-node cluster, 2 replicas, PG", [r.log for r in replicas]
        )
        assert counts["proposals"] >= 1000
        assert replicas[0].kills == 2
        assert replicas[1].kills == 1
        assert sum(answered.values()) >= counts["outcome rejected"]
    finally:
        stop_bot.set()
        for r in replicas:
            r.stop()
        with contextlib.suppress(Exception):
            await nc.close()
        await store.close()


async def test_chaos_on_one_server_and_one_replica_on_sqlite(tmp_path: Path) -> None:
    server = EmbeddedNats(store_dir=tmp_path / "nats")
    url = server.start()
    port = int(url.rsplit(":", 1)[1])
    bot = ApproverKey.generate()
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text(bot))
    db = f"sqlite+aiosqlite:///{tmp_path / 'headgate.db'}"
    replica = Replica(
        "replica",
        ["--nats-url", url, "--database-url", db, "--policy", str(policy),
         "--data-dir", str(tmp_path / "data")],
        replica_env(), tmp_path / "replica.log", free_ports(1)[0],
    )  # fmt: skip
    nc = await connect([url], None)
    stop_bot = asyncio.Event()
    store: Store | None = None
    try:
        replica.start()
        await wait_ready([replica])
        bot_task = asyncio.create_task(approver_bot(nc, bot, stop_bot))

        async def chaos() -> None:
            nonlocal server
            await asyncio.sleep(1.0)
            replica.kill()
            await asyncio.sleep(1.0)
            replica.start()
            await asyncio.sleep(1.5)
            server.kill()
            await asyncio.sleep(1.5)
            server = EmbeddedNats(store_dir=tmp_path / "nats", port=port)
            server.start()
            await asyncio.sleep(1.5)
            replica.kill()
            await asyncio.sleep(1.0)
            replica.start()

        load, _ = await asyncio.gather(drive_load(nc, 300, rate=60), chaos())
        store = await Store.open(db)
        done = await wait_for_outcomes(store, len(load.valid), timeout=120)
        assert done == len(load.valid), f"{done} of {len(load.valid)} proposals finished"
        stop_bot.set()
        await bot_task
        await check_guarantees(nc, store, load, bot, "1 server, 1 replica, SQLite", [replica.log])
        assert replica.kills == 2
    finally:
        stop_bot.set()
        replica.stop()
        with contextlib.suppress(Exception):
            await nc.close()
        if store is not None:
            await store.close()
        server.stop()
