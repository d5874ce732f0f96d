"""The web inbox in a real headless Chromium with a virtual passkey authenticator, against a
real service, a real nats-server and agents using the SDK: register from an invitation, see a
request arrive live, approve and reject with a passkey, and the refusals of replayed, forged and
repeated decisions."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.authenticator import SoftAuthenticator
from tests.support.browser import chromium, screenshot, wait
from tests.web.support import (
    approvers_policy,
    inbox_service,
    invite,
    item,
    post_json,
    register,
    status_of,
    web_url,
)
from workflow.canonical import jcs
from workflow.client import Headgate
from workflow.client.display import mask_text, target_of
from workflow.messages import Blocked, Released
from workflow.passkeys import decision_challenge
from workflow.signing import verify_record

pytestmark = pytest.mark.slow

TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def run(fn: Any, *args: Any) -> Any:
    return asyncio.to_thread(fn, *args)


async def refusals(h: Any) -> list[dict[str, Any]]:
    assert h.service.ctx is not None
    rows = await h.service.ctx.store.audit.rows()
    return [json.loads(r.data) for r in rows if r.kind == "decision.refused"]


TRICKY = [
    "plain",
    'quotes " and \\ backslash',
    "line\nbreak\ttab\r\x00\x1f\x7f",
    "unicode é ✓ 𝄞 \u2028 \u2029 ••••",
    "</script><b>",
    "",
]


async def test_the_browser_builds_the_same_rfc8785_form_and_digest_as_python(
    nats_url: str, tmp_path: Path, browser: Any
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h:
        await run(browser.get, f"{web_url(h)}/signin")
        for text in TRICKY:
            value = {"reason": text, "key": None, "approver": "alice", "b": [text, None],
                     "n": [1.0, 0.5, 1e-7, 1e21, -0.0, 10],
                     "\U0001f600": 1, "\ufb01": 2}  # fmt: skip
            script = "return headgate.canonical(arguments[0])"
            got = await run(browser.execute_script, script, value)
            assert got == jcs(value)
            digest = await run(
                browser.execute_async_script,
                "headgate.sha256hex(arguments[0]).then(arguments[1])",
                got,
            )
            assert digest == hashlib.sha256(got.encode()).hexdigest()


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": f"curl -H 'Authorization: Bearer {TOKEN}' https://x.example"},
        {"command": "echo " + "x" * 300},
        {"path": "/etc/hosts", "content": "127.0.0.1 a"},
        {"files": ["a.txt", "b.txt"], "mode": "w"},
        {"config": {"password": "hunter22", "user": "me"}},
    ],
)
async def test_the_page_recognises_a_masked_target_as_a_rendering_of_its_arguments_only(
    nats_url: str, tmp_path: Path, browser: Any, arguments: dict[str, Any]
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h:
        await run(browser.get, f"{web_url(h)}/signin")
        shown = target_of(arguments)
        script = "return headgate.renders(arguments[0], headgate.candidatesOf(arguments[1]))"
        assert await run(browser.execute_script, script, shown, arguments) is True
        assert await run(browser.execute_script, script, shown, {"command": "rm -rf /"}) is False
        assert await run(
            browser.execute_script, "return headgate.renders(arguments[0], [arguments[1]])",
            mask_text(f"deploy with {TOKEN}"), f"deploy with {TOKEN}",
        )  # fmt: skip


async def test_an_approver_invited_by_link_approves_and_rejects_from_the_browser(
    nats_url: str, tmp_path: Path, browser: Any
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h:
        link = await invite(h, people, "bob")
        await run(register, browser, link)
        # The invitation is used up; the registration is audited.
        await run(browser.get, link)
        assert "does not work" in await run(lambda: browser.find_element("css selector", "h1").text)
        assert "passkey.registered" in await h.audit_kinds()
        await run(browser.get, web_url(h))
        assert "Nothing is waiting" in await run(
            lambda: browser.find_element("css selector", "#inbox").text
        )
        async with Headgate.connect(
            h.service.url, agent="builder-7", prefix=h.subjects.prefix
        ) as agent:
            ticket = await agent.propose(
                "run_shell",
                {"command": f"git push https://x:{TOKEN}@github.com/acme/app main"},
                intent="publish the fix",
            )
            assert ticket.request_id is not None
            rid = ticket.request_id
            # It appears without a reload, and says what it is — secrets masked, the intent
            # marked as the agent's words.
            article = await run(item, browser, rid)
            text = await run(lambda: article.text)
            assert rid in text
            assert "run_shell" in text
            assert "git push https://x:••••@github.com/acme/app main" in text
            assert "The agent says (unverified): publish the fix" in text
            assert "Why reject?" not in text  # the reason field opens with Reject
            assert "0/1 approvals" in text
            assert TOKEN not in await run(lambda: browser.page_source)
            buttons = await run(
                lambda: [b.text for b in article.find_elements("css selector", "button")]
            )
            assert buttons[:2] == ["Approve", "Reject"]
            await run(browser.set_window_size, 390, 844)
            await run(screenshot, browser, "inbox-phone")

            await run(lambda: article.find_element("css selector", "button.approve").click())
            assert (await run(status_of, browser, rid)).startswith("Approved")
            released = await ticket.result(timeout=15)
            assert isinstance(released, Released)
            [approval] = released.approvals
            assert approval.approver == "bob"
            assert approval.passkey is not None
            assert approval.signature is None
            assert verify_record(approval)  # offline: the passkey signed this very decision
            signed = json.loads(approval.signed)
            assert signed["proposal_digest"] == released.proposal_digest
            assert (signed["request_id"], signed["verdict"]) == (rid, "approve")
            edited = approval.signed.replace('"approve"', '"reject"')
            assert not verify_record(approval.model_copy(update={"signed": edited}))
            assert h.service.ctx is not None
            by_passkey = h.service.ctx.metrics.registry.get_sample_value(
                "headgate_time_to_decision_seconds_count", {"channel": "passkey"}
            )
            assert by_passkey == 1.0

            # Reject: a field for the reason, Enter sends it, the agent gets it.
            second = await agent.propose("write_file", {"path": "notes.txt", "content": "hi"})
            assert second.request_id is not None
            article = await run(item, browser, second.request_id)
            await run(lambda: article.find_element("css selector", "button.reject").click())
            field = await run(lambda: article.find_element("css selector", "form.reason input"))
            await run(field.send_keys, "not on a Friday\n")
            assert (await run(status_of, browser, second.request_id)).startswith("Rejected")
            blocked = await second.result(timeout=15)
            assert isinstance(blocked, Blocked)
            assert blocked.outcome == "rejected"
            assert "not on a Friday" in blocked.reason
            # Both leave the inbox without a reload.
            await run(
                wait, browser,
                lambda d: not d.find_elements("css selector", "article.item"),
            )  # fmt: skip


async def test_replayed_forged_and_repeated_decisions_are_refused_and_audited(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h:
        phone_link = await invite(h, people, "bob")
        laptop_link = await invite(h, people, "bob")
        with chromium(width=390, height=844) as phone, chromium() as laptop:
            await run(register, phone, phone_link)
            await run(register, laptop, laptop_link)
            async with Headgate.connect(
                h.service.url, agent="builder-7", prefix=h.subjects.prefix, workspace="prod"
            ) as agent:
                ticket = await agent.propose("write_file", {"path": "a.txt", "content": "x"})
                rid = ticket.request_id
                assert rid is not None
                article = await run(item, phone, rid)
                assert "0/2 approvals" in await run(lambda: article.text)
                await run(lambda: article.find_element("css selector", "button.approve").click())
                assert (await run(status_of, phone, rid)).startswith("Approved")
                sent = (await h.observer.wait_for("decisions"))[0]
                decision = {k: v for k, v in sent.items() if k not in ("_subject", "passkey")}
                assertion = sent["passkey"]

                # 1. The same decision sent again: refused as a replay (the passkey's counter
                # did not move, and its nonce is used).
                replay = await run(
                    post_json, phone, "/api/decide", {"decision": decision, "passkey": assertion}
                )
                assert replay["status"] == 200
                assert replay["body"]["accepted"] is False
                assert "replayed assertion" in replay["body"]["message"]

                # 2. The assertion attached to another decision (a reject, a new nonce):
                # its challenge is not this decision, so it does not verify.
                moved = {**decision, "verdict": "reject", "reason": "x", "nonce": "f" * 32}
                forged = await run(
                    post_json, phone, "/api/decide", {"decision": moved, "passkey": assertion}
                )
                assert forged["body"]["accepted"] is False
                assert "does not verify" in forged["body"]["message"]

                # 3. A decision signed by a passkey nobody registered.
                stranger = SoftAuthenticator(origin=decision_origin(sent))
                fresh = {**decision, "nonce": "e" * 32}
                fake = stranger.sign(decision_challenge(fresh)).model_dump(mode="json")
                unknown = await run(
                    post_json, phone, "/api/decide", {"decision": fresh, "passkey": fake}
                )
                assert unknown["body"]["accepted"] is False
                assert "not registered" in unknown["body"]["message"]

                # 4. The same approver from a second session and passkey: counts once.
                article = await run(item, laptop, rid)
                await run(lambda: article.find_element("css selector", "button.approve").click())
                said = await run(status_of, laptop, rid)
                assert said.startswith("Refused")
                assert "already approved" in said

                # A session alone cannot sign: a decision without an assertion is refused
                # before it is sent, and one for another approver is not this session's.
                bare = await run(post_json, phone, "/api/decide", {"decision": fresh})
                assert bare["status"] == 400
                other = await run(
                    post_json, phone, "/api/decide",
                    {"decision": {**fresh, "approver": "alice"}, "passkey": fake},
                )  # fmt: skip
                assert other["status"] == 403

                codes = [r.get("refusal") for r in await refusals(h)]
                assert codes.count("replay") == 1
                assert codes.count("bad_signature") == 2  # the moved and the unknown
                assert codes.count("duplicate_approver") == 1
                history = await h.service_history(rid)
                assert history["status"] == "pending"
                assert [a["approver"] for a in history["approvals"]] == ["bob"]


def decision_origin(sent: dict[str, Any]) -> str:
    from workflow.passkeys import from_b64url

    return str(json.loads(from_b64url(sent["passkey"]["client_data_json"]))["origin"])
