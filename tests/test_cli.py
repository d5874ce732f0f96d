"""The quick start, for real: `headgate serve` with its embedded nats-server, then the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from workflow.client import Headgate
from workflow.messages import Released

HEADGATE = [sys.executable, "-m", "workflow"]


def cli(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    env["COLUMNS"] = "240"  # tables on one line each, as on a wide terminal
    return subprocess.run(
        [*HEADGATE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """`headgate serve` in an empty directory, as the README's quick start runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [*HEADGATE, "serve", "--default-ttl", "600"],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    url_file = tmp_path / ".headgate" / "nats.url"
    deadline = time.monotonic() + 30
    while not url_file.exists() or "headgate ready" not in (tmp_path / "serve.log").read_text():
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
        time.sleep(0.1)
    try:
        yield tmp_path, proc
    finally:
        if proc.poll() is None:
            proc.terminate()  # as an operator stops it: the embedded nats-server stops too
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
@pytest.mark.slow
def test_the_embedded_nats_server_dies_with_a_killed_serve(
    served: tuple[Path, subprocess.Popen[str]],
) -> None:
    _, proc = served
    servers = [
        p for p in _children(proc.pid) if "nats-server" in Path(f"/proc/{p}/cmdline").read_text()
    ]
    assert len(servers) == 1
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(servers[0]):
        assert time.monotonic() < deadline, "nats-server outlived the killed headgate serve"
        time.sleep(0.05)


@pytest.mark.slow
def test_quick_start_commands_work_from_the_serve_directory(
    served: tuple[Path, subprocess.Popen[str]],
) -> None:
    cwd, proc = served
    read = cli(
        cwd,
        "propose",
        "--agent",
        "demo",
        "--tool",
        "read_file",
        "--args",
        '{"path": "README.md"}',
        "--wait",
        "10",
    )
    assert read.returncode == 0, read.stderr
    assert "released" in read.stdout

    held = cli(
        cwd,
        "propose",
        "--agent",
        "demo",
        "--tool",
        "write_file",
        "--id",
        "w1",
        "--args",
        '{"path": "notes.txt", "token": "hunter2-secret"}',
        "--wait",
        "1",
    )
    assert held.returncode == 4, held.stdout + held.stderr  # still pending
    assert "held for approval" in held.stdout

    table = cli(cwd, "pending")
    assert "notes.txt" in table.stdout
    assert "hunter2-secret" not in table.stdout  # secrets are masked for people
    as_json = cli(cwd, "pending", "--json").stdout
    assert "hunter2-secret" not in as_json  # scripts get masked secrets too
    pending = json.loads(as_json)
    (item,) = pending["items"]
    assert item["proposal_id"] == "w1"
    assert item["risk_class"] == "write_local"

    approve = cli(cwd, "approve", "w1", "--reason", "fine")
    assert approve.returncode == 0, approve.stderr
    assert "now released" in approve.stdout

    again = cli(cwd, "approve", "w1")
    assert again.returncode == 1
    assert "already released" in again.stdout

    shown_text = cli(cwd, "show", "w1", "--json").stdout
    assert "hunter2-secret" not in shown_text
    shown = json.loads(shown_text)
    assert shown["status"] == "released"
    assert [a["approver"] for a in shown["approvals"]]
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds[:2] == ["proposal", "held"]
    assert "decision.accepted" in kinds
    assert "released" in kinds

    denied = cli(
        cwd,
        "propose",
        "--agent",
        "demo",
        "--tool",
        "delete_file",
        "--args",
        '{"path": "x"}',
        "--wait",
        "10",
    )
    assert denied.returncode == 3
    assert "denied" in denied.stdout

    explained = cli(cwd, "explain", "w1")
    assert "Decision: require_approval" in explained.stdout

    verify = cli(cwd, "audit", "verify")
    assert verify.returncode == 0
    assert "intact" in verify.stdout
    tail = cli(cwd, "audit", "tail", "-n", "50", "--json")
    assert {json.loads(line)["kind"] for line in tail.stdout.splitlines()} >= {
        "proposal",
        "held",
        "decision.accepted",
        "released",
        "blocked",
    }

    # SIGTERM: finish what is in hand, stop the embedded server, exit 0.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert not (cwd / ".headgate" / "nats.url").exists()
    assert "headgate stopped" in (cwd / "serve.log").read_text()


@pytest.mark.slow
def test_user_mistakes_get_one_line_errors_not_tracebacks(tmp_path: Path) -> None:
    cases = [
        (["propose", "--agent", "a", "--tool", "t", "--args", "{no"], "--args is not valid JSON"),
        (["propose", "--agent", "bad.name", "--tool", "t"], "invalid proposal: agent"),
        (["pending"], "no NATS URL"),
        (["serve", "--policy", str(tmp_path / "missing.toml")], "the policy file cannot be read"),
        (["audit", "verify", "--data-dir", str(tmp_path / "nowhere")], "no database at"),
        (
            ["audit", "verify", "--database-url", f"sqlite+aiosqlite:///{tmp_path / 'typo.db'}"],
            f"no database at {tmp_path / 'typo.db'}; check --database-url",
        ),
        (
            ["audit", "tail", "--database-url", "postgresql+asyncpg://hg:secret@127.0.0.1:1/x"],
            "cannot open the database postgresql+asyncpg://hg:***@127.0.0.1:1/x: ",
        ),
        (
            ["serve", "--database-url", "postgresql+asyncpg://hg:secret@127.0.0.1:1/x"],
            "cannot open the database postgresql+asyncpg://hg:***@127.0.0.1:1/x: ",
        ),
        (["keys", "new", "x", "--out", str(tmp_path)], "exists; refusing to overwrite"),
    ]
    for args, message in cases:
        result = cli(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    # The database is opened before a nats-server is started for nothing.
    assert not (tmp_path / ".headgate" / "nats").exists()


@pytest.mark.slow
def test_commands_that_read_the_database_never_create_one(
    tmp_path: Path, database_url: str
) -> None:
    """A mistyped --database-url must not become an empty Headgate database that, say,
    `audit verify` then calls intact: a missing SQLite file and a database without Headgate's
    schema are refused, and nothing is written to them."""
    policy = tmp_path / "policy.toml"
    policy.write_text("")
    commands = [
        ["audit", "verify"],
        ["audit", "tail"],
        ["audit", "export", "--out", str(tmp_path / "out.jsonl")],
        ["db", "vacuum"],
        ["policy", "backtest", str(policy)],
        ["tools", "pin", "--policy", str(policy)],
    ]
    sqlite = database_url.startswith("sqlite")
    expected = "no database at" if sqlite else "no Headgate database at"
    for command in commands:
        result = cli(tmp_path, *command, "--database-url", database_url)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert expected in result.stderr, (command, result.stderr)
        assert "Traceback" not in result.stderr
    if sqlite:
        assert not list(tmp_path.glob("headgate.db*"))
    else:
        assert asyncio.run(_tables(database_url)) == []
    assert not (tmp_path / "out.jsonl").exists()


async def _tables(url: str) -> list[str]:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    return [r["table_name"] for r in rows]


@pytest.mark.slow
def test_an_error_quoting_brackets_prints_them(tmp_path: Path) -> None:
    # The console takes `[word]` for markup: a path or an extra (`headgate[postgres]`) quoted
    # in an error lost its brackets, through both ways an error is printed.
    name = str(tmp_path / "policy[postgres].toml")
    for args in (["policy", "check", name], ["serve", "--policy", name]):
        result = cli(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert f"{name}: the policy file cannot be read" in result.stderr, (args, result.stderr)


@pytest.mark.slow
def test_keys_new_writes_a_private_seed_and_prints_the_policy_snippet(tmp_path: Path) -> None:
    result = cli(tmp_path, "keys", "new", "alice")
    assert result.returncode == 0, result.stderr
    seed = tmp_path / "alice.seed"
    assert seed.stat().st_mode & 0o777 == 0o600
    assert seed.read_text().startswith("SU")
    assert "[approvers.alice]" in result.stdout


@pytest.mark.slow
def test_a_second_serve_in_the_same_data_dir_is_refused(
    served: tuple[Path, subprocess.Popen[str]],
) -> None:
    cwd, proc = served
    second = cli(cwd, "serve", timeout=30)
    assert second.returncode == 2
    assert f"another headgate serve (pid {proc.pid}) is running" in second.stderr
    # The first one is untouched and still answers.
    assert cli(cwd, "pending").returncode == 0


def test_keys_show_prints_the_public_key_of_an_existing_seed(tmp_path: Path) -> None:
    created = cli(tmp_path, "keys", "new", "alice")
    (public,) = [line.split()[-1] for line in created.stdout.splitlines() if "public key" in line]
    shown = cli(tmp_path, "keys", "show", "alice.seed")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{public}\n"
    (tmp_path / "junk.seed").write_text("not a seed\n")
    for bad, message in (("junk.seed", "not a valid nkeys seed"), ("none.seed", "cannot read")):
        refused = cli(tmp_path, "keys", "show", bad)
        assert refused.returncode == 2
        (line,) = refused.stderr.splitlines()
        assert message in line


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    shown = cli(tmp_path, "--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"headgate {version('headgate')}\n"


def start_serve(cwd: Path, log_name: str) -> subprocess.Popen[str]:
    """`headgate serve` in `cwd`, returned once it is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    log = cwd / log_name
    with log.open("w") as out:
        proc = subprocess.Popen([*HEADGATE, "serve"], cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 60
    while "headgate ready" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return proc


def stop_serve(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


async def test_a_restart_of_serve_keeps_its_port_and_connected_clients_carry_on(
    tmp_path: Path,
) -> None:
    data = tmp_path / ".headgate"
    first = start_serve(tmp_path, "serve-1.log")
    second: subprocess.Popen[str] | None = None
    url = (data / "nats.url").read_text().strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
    watch = await asyncio.create_subprocess_exec(
        *HEADGATE, "inbox", "--watch", "--interval", "0.3", cwd=tmp_path, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert watch.stdout is not None

    async def watch_shows(text: str) -> None:
        assert watch.stdout is not None
        while text not in (await asyncio.wait_for(watch.stdout.readline(), 60)).decode():
            pass

    try:
        await watch_shows("nothing pending")
        async with Headgate.connect(agent="builder", data_dir=data) as hg:
            hg.recheck_interval = 3600  # the outcome must come from the results consumer
            stop_serve(first)
            await watch_shows("the service is unreachable")
            second = start_serve(tmp_path, "serve-2.log")
            assert (data / "nats.url").read_text().strip() == url

            ticket = await hg.propose("write_file", {"path": "after.txt"}, timeout=30)
            assert ticket.held
            assert ticket.request_id is not None
            await watch_shows(ticket.request_id)
            approved = await asyncio.to_thread(cli, tmp_path, "approve", ticket.request_id)
            assert approved.returncode == 0, approved.stdout + approved.stderr
            outcome = await ticket.result(timeout=30)
            assert isinstance(outcome, Released)
            assert outcome.arguments == {"path": "after.txt"}
    finally:
        if watch.returncode is None:
            watch.send_signal(signal.SIGINT)
            await asyncio.wait_for(watch.wait(), 30)
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                stop_serve(proc)
    assert watch.returncode == 0, (await watch.stderr.read()).decode() if watch.stderr else ""
