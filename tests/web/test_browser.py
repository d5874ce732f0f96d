"""The web inbox in a real headless Chromium with a virtual passkey authenticator, against a
real service and nats-server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.helpers import propose, running_service
from tests.support.browser import add_authenticator, chromium, screenshot, wait
from tests.web.support import RegistryBackend, web_inbox
from workflow.client.display import mask_text, target_of
from workflow.messages import canonical_json
from workflow.passkeys import Passkey, verify_decision

pytestmark = pytest.mark.slow

TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def run(fn: Any, *args: Any) -> Any:
    return asyncio.to_thread(fn, *args)


def by_css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def all_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


TRICKY = [
    "plain",
    'quotes " and \\ backslash',
    "line\nbreak\ttab\r\x00\x1f\x7f",
    "unicode é ✓ 𝄞 \u2028 \u2029 ••••",
    "</script><b>",
    "",
]


async def test_the_browser_builds_the_same_canonical_json_and_digest_as_python(
    nats_url: str, tmp_path: Path, browser: Any
) -> None:
    async with running_service(nats_url, tmp_path) as h, web_inbox(RegistryBackend(h)) as web:
        await run(browser.get, f"{web.inbox.settings.url}/signin")
        for text in TRICKY:
            value = {"reason": text, "key": None, "approver": "alice", "b": [text, None]}
            got = await run(
                browser.execute_script, "return headgate.canonical(arguments[0])", value
            )
            assert got == canonical_json(value)
            digest = await run(
                browser.execute_async_script,
                "headgate.sha256hex(arguments[0]).then(arguments[1])",
                got,
            )
            import hashlib

            assert digest == hashlib.sha256(got.encode()).hexdigest()


@pytest.mark.parametrize(
    ("arguments", "consistent"),
    [
        ({"command": f"curl -H 'Authorization: Bearer {TOKEN}' https://x.example"}, True),
        ({"command": "echo " + "x" * 300}, True),
        ({"path": "/etc/hosts", "content": "127.0.0.1 a"}, True),
        ({"files": ["a.txt", "b.txt"], "mode": "w"}, True),
        ({"config": {"password": "hunter22", "user": "me"}}, True),
    ],
)
async def test_the_page_recognises_the_masked_target_as_a_rendering_of_the_arguments(
    nats_url: str, tmp_path: Path, browser: Any, arguments: dict[str, Any], consistent: bool
) -> None:
    async with running_service(nats_url, tmp_path) as h, web_inbox(RegistryBackend(h)) as web:
        await run(browser.get, f"{web.inbox.settings.url}/signin")
        shown = target_of(arguments)
        script = "return headgate.renders(arguments[0], headgate.candidatesOf(arguments[1]))"
        assert await run(browser.execute_script, script, shown, arguments) is consistent
        # ... and not as a rendering of another call's arguments.
        other = {"command": "rm -rf /"}
        assert await run(browser.execute_script, script, shown, other) is False
        assert await run(
            browser.execute_script, "return headgate.renders(arguments[0], [arguments[1]])",
            mask_text(f"deploy with {TOKEN}"), f"deploy with {TOKEN}",
        )  # fmt: skip


async def test_an_invited_approver_registers_a_passkey_and_signs_a_request_shown_live(
    nats_url: str, tmp_path: Path, browser: Any
) -> None:
    async with running_service(nats_url, tmp_path) as h:
        backend = RegistryBackend(h)
        async with web_inbox(backend) as web:
            url = web.inbox.settings.url
            await run(browser.get, url)  # the authenticator belongs to the page's origin
            await run(add_authenticator, browser)
            token = backend.invite("alice")
            await run(browser.get, f"{url}/invite/{token}")
            button = await run(by_css, browser, "#register")
            assert "passkey" in button.text
            await run(button.click)
            await run(wait, browser, lambda d: d.current_url == f"{url}/")
            [passkey_info] = backend.passkeys.values()
            assert passkey_info.approver == "alice"
            # The invitation is used up.
            await run(browser.get, f"{url}/invite/{token}")
            assert "does not work" in (await run(by_css, browser, "h1")).text
            await run(browser.get, url)
            assert "Nothing is waiting" in (await run(by_css, browser, "#inbox")).text

            pid = await propose(
                h.nc, h.subjects, agent="builder-7", tool="run_shell",
                arguments={"command": f"git push https://x:{TOKEN}@github.com/acme/app main"},
                intent="publish the fix",
            )  # fmt: skip
            item = (await h.observer.wait_for("inbox", pid))[0]
            rid = item["request_id"]
            article = await run(
                wait, browser, lambda d: all_css(d, f"article[data-request-id='{rid}']")
            )
            text = article[0].text
            assert rid in text
            assert "run_shell" in text
            assert TOKEN not in browser.page_source
            assert "The agent says (unverified):" in text
            assert [b.text for b in all_css(browser, f"#rq-{rid} button")][:2] == [
                "Approve",
                "Reject",
            ]

            await run(browser.set_window_size, 390, 844)
            shot = await run(screenshot, browser, "inbox-phone")
            assert shot.stat().st_size > 0

            await run((await run(by_css, browser, f"#rq-{rid} button.approve")).click)
            decision = (await h.observer.wait_for("decisions"))[0]
            assert decision["request_id"] == rid
            assert decision["proposal_digest"] == item["proposal_digest"]
            assert decision["approver"] == "alice"
            raw = {k: v for k, v in decision.items() if k != "_subject"}
            passkey = Passkey(
                passkey_info.credential_id, "alice", passkey_info.public_key, "localhost"
            )
            check = verify_decision(raw, passkey, [url])
            assert check.valid, check.message
            assert json.loads(json.dumps(raw))["passkey"]["credential_id"] == passkey.credential_id
