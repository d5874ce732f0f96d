"""The real Claude Code, Codex and Gemini CLIs, gated by `headgate hook <client>`.

Each CLI runs non-interactively against a fake model (`fake_model.py`) that asks for one shell
call appending to a file, with `headgate hook` configured as the client's hook, the service and
nats-server real. The CLIs come from npm (`.ci/run` installs them into `.agent-clis/`; set
HEADGATE_AGENT_CLIS to use another install); without them these tests are skipped, and fail
under CI.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shlex
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.fake_model import FakeModel
from tests.service.helpers import Harness, decision, running_service, send_decision
from workflow.adapters import claude_code, codex, gemini
from workflow.client.approver import Approver

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLIS = Path(os.environ.get("HEADGATE_AGENT_CLIS") or ROOT / ".agent-clis") / "node_modules/.bin"
AGENT = "cli-agent"
REASON = "not in this repository, please"


def cli(name: str) -> Path:
    path = CLIS / name
    if not path.exists():
        message = f"{path} is not installed (npm install, see .ci/run)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def hook_command(client: str, nats_url: str, prefix: str, wait: float, *extra: str) -> str:
    return shlex.join([
        sys.executable, "-m", "workflow", "hook", client, "--nats-url", nats_url,
        "--prefix", prefix, "--agent", AGENT, "--wait", f"{wait:g}", "--connect-timeout", "2",
        "--data-dir", "/nonexistent-headgate-data", *extra,
    ])  # fmt: skip


def claude(home: Path, work: Path, model: str, command: str) -> tuple[list[str], dict[str, str]]:
    (home / ".claude").mkdir(parents=True)
    (home / ".claude/settings.json").write_text(claude_code.config(command, 40))
    env = {"ANTHROPIC_BASE_URL": model, "ANTHROPIC_API_KEY": "sk-ant-fake",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}  # fmt: skip
    argv = [str(cli("claude")), "-p", "append hello to the file", "--output-format", "json"]
    return argv, env


def codex_cli(home: Path, work: Path, model: str, command: str) -> tuple[list[str], dict[str, str]]:
    config = home / ".codex"
    config.mkdir(parents=True)
    (config / "config.toml").write_text(
        'model = "gpt-fake"\nmodel_provider = "fake"\napproval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\ncheck_for_update_on_startup = false\n\n'
        "[analytics]\nenabled = false\n\n"
        "[features]\nplugins = false\nremote_plugin = false\napps = false\n\n"
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{model}/v1"\n'
        'wire_api = "responses"\nenv_key = "FAKE_API_KEY"\n\n' + codex.config(command, 40) + "\n"
    )
    env = {"CODEX_HOME": str(config), "FAKE_API_KEY": "sk-fake"}
    argv = [str(cli("codex")), "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust",
            "append hello to the file"]  # fmt: skip
    return argv, env


def gemini_cli(
    home: Path, work: Path, model: str, command: str
) -> tuple[list[str], dict[str, str]]:
    (home / ".gemini").mkdir(parents=True)
    settings = json.loads(gemini.config(command, 40))
    settings.update({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    })  # fmt: skip
    (home / ".gemini/settings.json").write_text(json.dumps(settings))
    env = {"GEMINI_API_KEY": "fake", "GOOGLE_GEMINI_BASE_URL": model,
           "GEMINI_CLI_TRUST_WORKSPACE": "true"}  # fmt: skip
    argv = [str(cli("gemini")), "-p", "append hello to the file", "--yolo"]
    return argv, env


Setup = Callable[[Path, Path, str, str], tuple[list[str], dict[str, str]]]
CLIENTS: dict[str, Setup] = {"claude-code": claude, "codex": codex_cli, "gemini": gemini_cli}


async def drive(
    client: str, tmp: Path, nats_url: str, prefix: str, *, wait: float = 20.0,
    during: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> tuple[Path, FakeModel, str]:  # fmt: skip
    """Run the CLI once; returns the file the model's shell call appends to, the fake model
    and the CLI's output."""
    home, work = tmp / "home", tmp / "work"
    work.mkdir(parents=True)
    out = tmp / "out.txt"
    with FakeModel(f"echo hello >> {out}") as model:
        argv, env = CLIENTS[client](home, work, model.url, hook_command(client, nats_url,
                                                                         prefix, wait))  # fmt: skip
        environment = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **env}
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=work, env=environment, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        helper = asyncio.create_task(during()) if during else None
        output, _ = await asyncio.wait_for(proc.communicate(), 240)
        if helper is not None:
            await asyncio.wait_for(helper, 30)
    return out, model, output.decode(errors="replace")


async def decide_first(h: Harness, verdict: str) -> None:
    (item,) = await h.observer.wait_for("inbox", timeout=60)
    await send_decision(
        h.nc, h.subjects,
        decision(h.key, item["request_id"], item["proposal_digest"], verdict, reason=REASON),
    )  # fmt: skip


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_a_rejected_shell_call_does_not_run_and_the_model_reads_why(
    client: str, nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path / "service") as h:
        out, model, output = await drive(
            client, tmp_path, nats_url, h.subjects.prefix,
            during=lambda: decide_first(h, "reject"),
        )  # fmt: skip
        assert not out.exists(), output
        assert model.sent_back(REASON), output
        assert len(h.observer.of("blocked")) == 1


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_an_approved_shell_call_runs_once_and_is_reported(
    client: str, nats_url: str, tmp_path: Path
) -> None:
    async with running_service(nats_url, tmp_path / "service") as h:
        out, _, output = await drive(
            client, tmp_path, nats_url, h.subjects.prefix,
            during=lambda: decide_first(h, "approve"),
        )  # fmt: skip
        assert out.read_text() == "hello\n", output
        (released,) = h.observer.of("released")
        (executed,) = await h.observer.wait_for("executed", released["proposal_id"])
        assert executed["success"] is True


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_with_headgate_stopped_the_shell_call_does_not_run(
    client: str, tmp_path: Path
) -> None:
    out, model, output = await drive(client, tmp_path, "nats://127.0.0.1:1", "headgate")
    assert not out.exists(), output
    assert model.sent_back("could not check this call"), output


# --------------------------------------------------------------------------- claude -p: defer


async def claude_p(home: Path, work: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    """One `claude -p … --output-format json` run; its JSON result."""
    environment = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **env}
    proc = await asyncio.create_subprocess_exec(
        str(cli("claude")), "-p", *args, "--output-format", "json", cwd=work, env=environment,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, (out, err)
    result: dict[str, Any] = json.loads(out)
    return result


async def decide_with_the_sdk(h: Harness, nats_url: str, verdict: str) -> None:
    async with Approver.connect(
        nats_url, name=getpass.getuser() or "local", key=h.key, prefix=h.subjects.prefix,
        data_dir=h.data_dir,
    ) as me:  # fmt: skip
        inbox = me.inbox()
        item = await asyncio.wait_for(inbox.__anext__(), 30)
        await inbox.aclose()
        if verdict == "approve":
            await item.approve("fine")
        else:
            await item.reject(REASON)


@pytest.mark.parametrize("verdict", ["approve", "reject"])
async def test_claude_p_defers_a_held_call_and_the_resumed_run_gets_the_decision(
    verdict: str, nats_url: str, tmp_path: Path
) -> None:
    home, work, out = tmp_path / "home", tmp_path / "work", tmp_path / "out.txt"
    work.mkdir()
    async with running_service(nats_url, tmp_path / "service") as h:
        command = hook_command("claude-code", nats_url, h.subjects.prefix, 1, "--on-pending",
                               "defer")  # fmt: skip
        with FakeModel(f"echo hello >> {out}") as model:
            _, env = claude(home, work, model.url, command)
            first = await claude_p(home, work, env, "append hello to the file")
            # Held past --wait: the run ends as deferred, the call has not run.
            assert first["stop_reason"] == "tool_deferred", first
            assert first["deferred_tool_use"]["name"] == "Bash"
            assert not out.exists()
            (held,) = h.observer.of("held")
            await decide_with_the_sdk(h, nats_url, verdict)
            resumed = await claude_p(home, work, env, "--resume", first["session_id"])
            assert resumed["stop_reason"] == "end_turn", resumed
            # The resumed call bound to the same request: nothing else was proposed.
            assert len(h.observer.of("held")) == 1
            if verdict == "approve":
                assert out.read_text() == "hello\n"
                (released,) = h.observer.of("released")
                assert released["proposal_id"] == held["proposal_id"]
                (executed,) = await h.observer.wait_for("executed", held["proposal_id"])
                assert executed["success"] is True
            else:
                assert not out.exists()
                assert model.sent_back(REASON)
                assert len(h.observer.of("blocked")) == 1


# --------------------------------------------------------------------------- HTTP hooks


class Serve:
    """A real `headgate serve --hook-listen` in its own data dir (embedded nats-server)."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / ".headgate"
        self.log = root / "serve.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEADGATE_")}
        with self.log.open("w") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "workflow", "serve", "--hook-listen", "127.0.0.1:0",
                "--data-dir", str(self.data), cwd=self.root, env=env, stdout=log, stderr=log,
            )  # fmt: skip
        for _ in range(600):
            if "headgate ready" in self.log.read_text():
                return
            assert self.proc.returncode is None, self.log.read_text()
            await asyncio.sleep(0.1)
        raise AssertionError(self.log.read_text())

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 30)

    def url(self) -> str:
        return (self.data / "hook.url").read_text().strip()

    def token(self) -> str:
        return (self.data / "hook.token").read_text().strip()


def http_hook_settings(home: Path, hook_url: str) -> None:
    url = f"{hook_url}/hooks/claude-code?agent={AGENT}&wait=30"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude/settings.json").write_text(
        claude_code.http_config(url, 40, "HEADGATE_HOOK_TOKEN")
    )


async def approver_decides(data: Path, verdict: str) -> None:
    async with Approver.connect(
        name=getpass.getuser() or "local", key=data / "approver.seed", data_dir=data
    ) as me:
        inbox = me.inbox()
        item = await asyncio.wait_for(inbox.__anext__(), 60)
        await inbox.aclose()
        if verdict == "approve":
            await item.approve("fine")
        else:
            await item.reject(REASON)


async def test_claude_code_http_hook_on_serve_gates_a_shell_call_and_fails_open_without_it(
    tmp_path: Path,
) -> None:
    serve = Serve(tmp_path)
    await serve.start()
    try:
        hook_url, token = serve.url(), serve.token()
        for verdict in ("reject", "approve"):
            home, work, out = tmp_path / verdict, tmp_path / verdict / "work", tmp_path / verdict
            work.mkdir(parents=True)
            out = out / "out.txt"
            with FakeModel(f"echo hello >> {out}") as model:
                _, env = claude(home, work, model.url, "unused")
                http_hook_settings(home, hook_url)
                env["HEADGATE_HOOK_TOKEN"] = token
                deciding = asyncio.create_task(approver_decides(serve.data, verdict))
                result = await claude_p(home, work, env, "append hello to the file")
                await asyncio.wait_for(deciding, 30)
            if verdict == "reject":
                assert not out.exists(), result
                assert model.sent_back(REASON), result
            else:
                assert out.read_text() == "hello\n", result
    finally:
        await serve.stop()
    # serve stopped: Claude Code takes the refused connection as "no hook ran" and falls back
    # to its own permission rules — where those allow the shell, the call runs (fail open);
    # where they would ask, `claude -p` cannot ask and does not run it.
    for allowed in (True, False):
        home = tmp_path / f"down-{allowed}"
        work, out = home / "work", home / "out.txt"
        work.mkdir(parents=True)
        with FakeModel(f"echo hello >> {out}") as model:
            _, env = claude(home, work, model.url, "unused")
            http_hook_settings(home, hook_url)
            env["HEADGATE_HOOK_TOKEN"] = token
            rules = ("--allowedTools", "Bash") if allowed else ()
            result = await claude_p(home, work, env, "append hello to the file", *rules)
        if allowed:
            assert out.read_text() == "hello\n", result
        else:
            assert not out.exists(), result
            assert result["permission_denials"], result
