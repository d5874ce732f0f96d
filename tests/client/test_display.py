"""What approvers see: masked secrets, the one-line summary, the inbox view and its keys."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from tests.client.support import guarded_service
from tests.service.helpers import propose
from workflow.cli.inbox import inbox
from workflow.cli.inbox_render import DOWN, ENTER, ESCAPE, UP, InboxState, render
from workflow.cli.inbox_view import parse_keys
from workflow.client.display import (
    MASK,
    is_secret_key,
    mask_secrets,
    mask_text,
    masked_entry,
    summarize,
)
from workflow.messages import ApprovalRequirement, DecisionVerdict, PendingEntry

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    "key",
    ["password", "API_KEY", "apiKey", "x-api-key", "Authorization", "client_secret",
     "github_token", "db_passwd", "aws_secret_access_key", "private_key", "Cookie"],
)  # fmt: skip
def test_secret_argument_names_are_recognised(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["path", "command", "content", "url", "branch", "keyboard_layout"])
def test_ordinary_argument_names_are_not_secret(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("curl -H 'Authorization: Bearer abcdef123456XYZ' https://api.example.com",
         "https://api.example.com", "abcdef123456XYZ"),
        (f"token is {JWT}", "token is", "eyJzdWIi"),
        ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234", "export", "abcdefghijklmnop"),
        ("git clone https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/x/y",
         "github.com/x/y", "ghp_abcdefghijklmnop"),
        ("psql postgresql://app:hunter2secret@db:5432/app", "db:5432/app", "hunter2secret"),
        ("mysql --password=s3cr3tpw -u root", "-u root", "s3cr3tpw"),
        ("aws s3 ls  # key AKIAIOSFODNN7EXAMPLE", "aws s3 ls", "AKIAIOSFODNN7EXAMPLE"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "BEGIN",
         "MIIEow"),
        ("opaque Xk9f2LmQ8zR4tY7wP1nB6vC3hJ5sD0aE", "opaque", "Xk9f2LmQ8zR4"),
    ],
)  # fmt: skip
def test_values_that_look_like_credentials_are_masked_and_the_rest_stays(
    text: str, kept: str, gone: str
) -> None:
    masked = mask_text(text)
    assert kept in masked
    assert gone not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text",
    ["rm -rf build/", "git push origin main", "/work/main/workflow/client/agent.py",
     "test_write_file_is_held_until_quorum", "9fceb02d0ae598e95dc970b74767f19372d61af8"],
)  # fmt: skip
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert mask_text(text) == text


def test_a_masked_value_in_quoted_code_keeps_the_closing_backtick() -> None:
    assert mask_text("`API_KEY=abcd1234xyz` sets a variable") == f"`API_KEY={MASK}` sets a variable"


def test_mask_secrets_walks_nested_arguments_by_key_and_by_value() -> None:
    args = {"url": "https://x", "headers": {"Authorization": "Basic dXNlcjpwYXNz"},
            "env": [{"name": "A", "value": JWT}], "password": "pw", "empty_token": "",
            "max_tokens": 100}  # fmt: skip
    assert mask_secrets(args) == {
        "url": "https://x", "headers": {"Authorization": MASK},
        "env": [{"name": "A", "value": MASK}], "password": MASK, "empty_token": "",
        "max_tokens": 100,
    }  # fmt: skip


def entry(**over: Any) -> PendingEntry:
    fields: dict[str, Any] = {
        "request_id": "rq_1", "proposal_id": "p-1", "agent": "builder-7", "workspace": "acme",
        "tool": "run_shell",
        "arguments": {"command": "curl -H 'Authorization: Bearer abcdef123456XYZ' https://x.io"},
        "risk_class": "exec", "severity": "high",
        "reasons": ["`curl` sends data over the network (network)."],
        "requirement": ApprovalRequirement(quorum=2), "approvals": ["alice"],
        "proposal_digest": "d", "created_at": NOW - timedelta(minutes=5),
        "expires_at": NOW + timedelta(minutes=59),
    }  # fmt: skip
    fields.update(over)
    return PendingEntry(**fields)


def test_summarize_names_the_agent_tool_and_command_with_secrets_masked() -> None:
    line = summarize(entry(), NOW)
    assert line == (
        f"builder-7 wants run_shell `curl -H 'Authorization: Bearer {MASK}' https://x.io` in acme"
        " — exec (high), 1/2 approvals (alice), expires in 59m"
    )


def test_summarize_uses_the_target_path_when_there_is_no_command() -> None:
    line = summarize(entry(tool="write_file", arguments={"path": "src/app.py", "content": "x"},
                           risk_class="write_local", severity="medium", approvals=[]))  # fmt: skip
    assert line.startswith("builder-7 wants write_file `src/app.py` in acme — write_local")
    assert "0/2 approvals" in line


def render_text(state: InboxState, *, interactive: bool = True, width: int = 160) -> str:
    out = Console(record=True, width=width, color_system=None)
    out.print(render(state, NOW, interactive=interactive))
    return out.export_text()


def test_inbox_view_lists_newest_first_with_masked_arguments_risk_approvals_and_time() -> None:
    state = InboxState()
    older = entry(request_id="rq_old", tool="write_file", arguments={"path": "old.txt"},
                  created_at=NOW - timedelta(hours=1), approvals=[])  # fmt: skip
    state.update([older, entry()])
    text = render_text(state)
    assert "2 pending" in text
    assert text.index("run_shell") < text.index("write_file")
    assert "abcdef123456XYZ" not in text
    assert MASK in text
    assert "exec (high)" in text
    assert "`curl` sends data over the network" in text
    assert "1/2" in text
    assert "alice" in text
    assert "59m" in text
    assert "▶" in text
    assert "builder-7 wants run_shell" in text  # the selected item's summary
    assert "a approve" in text


def test_the_read_only_view_shows_no_selection_or_keys() -> None:
    state = InboxState()
    state.update([entry()])
    text = render_text(state, interactive=False)
    assert "▶" not in text
    assert "a approve" not in text


def test_keys_move_the_selection_and_produce_decisions() -> None:
    state = InboxState()
    state.update([entry(request_id="rq_a", created_at=NOW), entry(request_id="rq_b")])
    assert state.on_key(DOWN) is None
    assert state.current is not None
    assert state.current.request_id == "rq_b"
    state.on_key(DOWN)
    assert state.selected == 1
    state.on_key(UP)
    assert state.on_key("a") is None  # an exec call (high): confirmed first
    approve = state.on_key("y")
    assert approve is not None
    assert (approve.verdict, approve.entry.request_id) == (DecisionVerdict.APPROVE, "rq_a")
    assert state.on_key("r") is None
    assert state.typing_reason
    for key in "not now":
        assert state.on_key(key) is None
    reject = state.on_key(ENTER)
    assert reject is not None
    assert (reject.verdict, reject.reason) == (DecisionVerdict.REJECT, "not now")
    state.on_key("q")
    assert state.quit


def test_a_rejection_needs_a_reason_and_escape_cancels_it() -> None:
    state = InboxState()
    state.update([entry()])
    state.on_key("r")
    assert state.on_key(ENTER) is None
    assert "reason" in state.message
    state.on_key(ESCAPE)
    assert not state.typing_reason


def test_the_selection_follows_its_request_when_new_ones_arrive() -> None:
    state = InboxState()
    state.update([entry(request_id="rq_a")])
    state.update([entry(request_id="rq_a"), entry(request_id="rq_new", created_at=NOW)])
    assert state.current is not None
    assert state.current.request_id == "rq_a"


def test_terminal_input_is_parsed_into_keys() -> None:
    assert list(parse_keys("\x1b[Aj\x1b[Ba\r\x7f\x1bq")) == [
        UP, "j", DOWN, "a", ENTER, "backspace", ESCAPE, "q",
    ]  # fmt: skip


async def test_inbox_command_prints_pending_requests_once(nats_url: str, tmp_path: Path) -> None:
    async with guarded_service(nats_url, tmp_path) as h:
        pid = await propose(h.nc, h.subjects, tool="write_file", workspace="acme",
                            arguments={"path": "deploy.sh", "api_key": "abc123secret"})  # fmt: skip
        await h.observer.wait_for("inbox", pid)
        app = typer.Typer()
        app.command()(inbox)
        result = await asyncio.to_thread(
            CliRunner().invoke, app,
            ["--nats-url", nats_url, "--prefix", h.subjects.prefix, "--workspace", "acme"],
            env={"COLUMNS": "200"},
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "1 pending" in result.output
    assert "write_file" in result.output
    assert "deploy.sh" in result.output
    assert "abc123secret" not in result.output


@pytest.mark.parametrize(
    ("risk_class", "severity", "confirmed"),
    [("write_local", "medium", False), ("write_local", "high", True), ("egress", "critical", True),
     ("exec", "medium", True), ("destructive", "low", True), ("external", "low", False)],
)  # fmt: skip
def test_approving_an_exec_destructive_or_high_risk_call_needs_a_confirmation(
    risk_class: str, severity: str, confirmed: bool
) -> None:
    state = InboxState()
    state.update([entry(risk_class=risk_class, severity=severity)])
    first = state.on_key("a")
    if not confirmed:
        assert first is not None
        assert first.verdict == DecisionVerdict.APPROVE
        return
    assert first is None
    prompt = render_text(state)
    assert f"approve run_shell `curl -H 'Authorization: Bearer {MASK}' https://x.io`" in prompt
    assert "y approves, any other key cancels" in prompt
    assert state.on_key("n") is None  # cancelled
    assert state.message == "not approved"
    assert state.on_key("a") is None
    action = state.on_key("y")
    assert action is not None
    assert action.verdict == DecisionVerdict.APPROVE


REQUEST_IDS = ["rq_0123456789abcdef01234567", "rq_fedcba9876543210fedcba98"]


def test_request_ids_can_be_copied_whole_at_80_columns() -> None:
    state = InboxState()
    state.update([
        entry(request_id=rid, tool="a_tool_with_a_rather_long_name_indeed",
              arguments={"path": "/srv/" + "deep/" * 30 + "file.txt", "content": "x" * 300},
              created_at=NOW - timedelta(minutes=n))
        for n, rid in enumerate(REQUEST_IDS)
    ])  # fmt: skip
    lines = render_text(state, width=80).splitlines()
    assert all(len(line) <= 80 for line in lines)
    for rid in REQUEST_IDS:
        assert any(rid in line for line in lines), rid
    state.on_key("d")
    detail = render_text(state, width=80).splitlines()
    assert any(REQUEST_IDS[0] in line for line in detail)


def test_the_detail_pane_shows_the_whole_request_with_secrets_masked() -> None:
    state = InboxState()
    arguments = {"command": "curl https://x.io", "password": "hunter2"}
    state.update([entry(intent="check the service with token=s3cr3tvalue123", arguments=arguments)])
    state.on_key(ENTER)
    assert state.detail
    text = render_text(state)
    for shown in ("rq_1", "p-1", "builder-7 / acme", "run_shell", "exec (high)",
                  "2 approval(s)", "alice", "curl https://x.io", "`curl` sends data",
                  "the agent says (unverified)"):  # fmt: skip
        assert shown in text, shown
    assert "hunter2" not in text
    assert "s3cr3tvalue123" not in text
    state.on_key("d")
    assert not state.detail


def test_the_intent_is_shown_everywhere_as_the_agents_unverified_words() -> None:
    item = entry(intent="rotate the logs")
    assert summarize(item, NOW).endswith('; the agent says (unverified): "rotate the logs"')
    state = InboxState()
    state.update([item])
    assert 'the agent says (unverified): "rotate the logs"' in render_text(state)
    assert "unverified" not in summarize(entry(), NOW)  # no intent, no line


def test_reasons_and_intent_are_masked_in_every_view() -> None:
    leaky = entry(reasons=[f"`curl -H 'Authorization: Bearer {JWT}'` sends data"],
                  intent=f"use {JWT}")  # fmt: skip
    state = InboxState()
    state.update([leaky])
    for text in (render_text(state), summarize(leaky, NOW)):
        assert JWT not in text
    state.on_key("d")
    assert JWT not in render_text(state)
    masked = masked_entry(leaky)
    assert JWT not in masked.model_dump_json()
    assert masked.proposal_digest == leaky.proposal_digest


def test_explain_masks_secrets_the_trail_quotes(tmp_path: Path) -> None:
    from workflow.cli.policy_cmds import explain

    command = f"curl -H 'Authorization: Bearer {JWT}' https://x.io/upload"
    path = tmp_path / "proposal.json"
    path.write_text(json.dumps({"id": "p-1", "agent": "a", "tool": "run_shell",
                                "arguments": {"command": command}}))  # fmt: skip
    app = typer.Typer()
    app.command()(explain)
    for extra in ([], ["--json"]):
        result = CliRunner().invoke(app, ["--proposal", str(path), *extra])
        assert result.exit_code == 0, result.output
        assert "x.io" in result.stdout
        assert JWT not in result.stdout
