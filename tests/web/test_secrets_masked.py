"""The web inbox's pages (the inbox and a request's detail) never show a secret of a proposal,
not even through the classifier's reasons: the secrets of tests/test_secrets_never_leave.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.service.helpers import propose, wait_until
from tests.support.authenticator import SoftAuthenticator
from tests.test_secrets_never_leave import COMMAND, PASSWORD, leaked
from tests.web.support import approvers_policy, inbox_service, invite, web_url
from tests.web.test_sessions import client, register, session_cookie

pytestmark = pytest.mark.slow


async def test_the_inbox_and_detail_pages_show_no_secret_of_the_call(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h, client(h) as c:
        auth = SoftAuthenticator(origin=web_url(h))
        session, _ = session_cookie(await register(c, await invite(h, people, "bob"), auth))
        pid = await propose(
            h.nc, h.subjects, agent="builder-7", tool="run_shell",
            arguments={"command": COMMAND}, intent=f"upload with --password={PASSWORD}",
        )  # fmt: skip
        rid = (await h.observer.wait_for("inbox", pid))[0]["request_id"]
        cookie = {"Cookie": f"hg_session={session}"}

        async def inbox_page() -> str:
            return (await c.get("/", headers=cookie)).text

        # The inbox is refreshed from the service's answers when something changes.
        await wait_until(inbox_page, lambda text: rid in text)
        pages = {
            "inbox": await c.get("/", headers=cookie),
            "fragment": await c.get("/fragments/inbox", headers=cookie),
            "detail": await c.get(f"/requests/{rid}", headers=cookie),
        }
        for name, page in pages.items():
            assert page.status_code == 200, name
            assert "curl" in page.text, name  # the call is shown…
            assert leaked(page.text) == [], name  # …without its secrets
