"""The web inbox's HTTP surface with a real client against a real service: cookies, CSRF,
Origin, rate limits, one-time invitations and who may hand them out. The authenticator is the
software one (real keys and signatures); the browser tests use Chromium's."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.service.helpers import Harness, propose
from tests.support.authenticator import SoftAuthenticator
from tests.web.support import approvers_policy, cli, inbox_service, invite, web_url
from workflow.client import transport
from workflow.messages import WebInvite, WebInviteReply
from workflow.passkeys import from_b64url

pytestmark = pytest.mark.slow


@asynccontextmanager
async def client(h: Harness) -> AsyncIterator[httpx.AsyncClient]:
    url = web_url(h)
    async with httpx.AsyncClient(base_url=url, headers={"Origin": url}) as c:
        yield c


def session_cookie(response: httpx.Response) -> tuple[str, str]:
    """The session cookie's value and its attributes, as the server set them."""
    header = next(h for h in response.headers.get_list("set-cookie") if h.startswith("hg_session="))
    value = header.split(";", 1)[0].split("=", 1)[1]
    return value, header.lower()


async def register(c: httpx.AsyncClient, link: str, auth: SoftAuthenticator) -> httpx.Response:
    token = link.rsplit("/", 1)[1]
    begun = await c.post(f"/api/invite/{token}/begin")
    assert begun.status_code == 200, begun.text
    challenge = from_b64url(begun.json()["options"]["challenge"])
    return await c.post(
        f"/api/invite/{token}/finish",
        json={"credential": auth.register(challenge)},
        headers={"Cookie": f"hg_ceremony={begun.cookies['hg_ceremony']}"},
    )


async def test_a_session_cookie_is_httponly_samesite_strict_and_secure(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h, client(h) as c:
        auth = SoftAuthenticator(origin=web_url(h))
        done = await register(c, await invite(h, people, "bob"), auth)
        assert done.status_code == 200, done.text
        assert done.json()["approver"] == "bob"
        _, attributes = session_cookie(done)
        assert "httponly" in attributes
        assert "samesite=strict" in attributes
        assert "secure" in attributes


async def test_state_changes_need_the_sessions_csrf_token_and_the_inboxs_origin(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h, client(h) as c:
        auth = SoftAuthenticator(origin=web_url(h))
        session, _ = session_cookie(await register(c, await invite(h, people, "bob"), auth))
        cookie = f"hg_session={session}"
        page = await c.get("/", headers={"Cookie": cookie})
        assert page.status_code == 200
        csrf = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        body = {"decision": {"request_id": "rq_x"}}
        assert (await c.post("/api/decide", json=body)).status_code == 401  # no session
        no_token = await c.post("/api/decide", json=body, headers={"Cookie": cookie})
        assert no_token.status_code == 403
        assert "CSRF" in no_token.json()["error"]
        wrong = await c.post(
            "/api/decide", json=body, headers={"Cookie": cookie, "X-CSRF-Token": "x" * 43}
        )
        assert wrong.status_code == 403
        elsewhere = await c.post(
            "/api/decide", json=body,
            headers={"Cookie": cookie, "X-CSRF-Token": csrf, "Origin": "https://evil.example"},
        )  # fmt: skip
        assert elsewhere.status_code == 403
        valid = await c.post(
            "/api/decide", json=body, headers={"Cookie": cookie, "X-CSRF-Token": csrf}
        )
        assert valid.status_code == 400  # past the guards: the decision itself is incomplete
        # Pages say how they may be used.
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "no-referrer"


async def test_the_detail_page_shows_the_whole_proposal_masked_and_the_policy_trail(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h, client(h) as c:
        auth = SoftAuthenticator(origin=web_url(h))
        session, _ = session_cookie(await register(c, await invite(h, people, "bob"), auth))
        secret = "sk-ant-abcdefghijklmnopqrstuvwxyz012345"
        pid = await propose(
            h.nc, h.subjects, agent="builder-7", tool="http_post",
            arguments={"url": "https://api.example.com/x", "api_key": secret, "body": "hi"},
            intent=f"post it with {secret}",
        )  # fmt: skip
        rid = (await h.observer.wait_for("inbox", pid))[0]["request_id"]
        page = await c.get(f"/requests/{rid}", headers={"Cookie": f"hg_session={session}"})
        assert page.status_code == 200
        text = page.text
        assert "The whole proposal" in text
        assert "Policy trail" in text
        assert "https://api.example.com/x" in text
        assert secret not in text
        assert ">Approve</button>" in text
        assert ">Reject</button>" in text
        assert (await c.get(f"/requests/{rid}")).status_code == 303  # signed out: sign in first
        # The exact proposal, secrets included, only for a session, and only when deciding.
        exact = await c.get(
            f"/api/requests/{rid}/proposal", headers={"Cookie": f"hg_session={session}"}
        )
        assert secret in exact.json()["proposal"]
        assert (await c.get(f"/api/requests/{rid}/proposal")).status_code == 401


async def test_sign_in_with_a_registered_passkey_and_its_rate_limit(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h, client(h) as c:
        auth = SoftAuthenticator(origin=web_url(h))
        assert (await register(c, await invite(h, people, "bob"), auth)).status_code == 200
        begun = await c.post("/api/signin/begin")
        challenge = from_b64url(begun.json()["options"]["challenge"])
        ceremony = {"Cookie": f"hg_ceremony={begun.cookies['hg_ceremony']}"}
        signed_in = await c.post(
            "/api/signin/finish", json={"credential": auth.assertion_json(challenge)},
            headers=ceremony,
        )  # fmt: skip
        assert signed_in.status_code == 200, signed_in.text
        assert signed_in.json()["approver"] == "bob"
        # The ceremony is used up: the same assertion does not sign in twice.
        again = await c.post(
            "/api/signin/finish", json={"credential": auth.assertion_json(challenge)},
            headers=ceremony,
        )  # fmt: skip
        assert again.status_code == 400
        # A passkey nobody registered signs in no one.
        begun = await c.post("/api/signin/begin")
        stranger = SoftAuthenticator(origin=web_url(h))
        challenge = from_b64url(begun.json()["options"]["challenge"])
        refused = await c.post(
            "/api/signin/finish", json={"credential": stranger.assertion_json(challenge)},
            headers={"Cookie": f"hg_ceremony={begun.cookies['hg_ceremony']}"},
        )  # fmt: skip
        assert refused.status_code == 401
        # Attempts per client address are limited (10 a minute).
        codes = [(await c.post("/api/signin/begin")).status_code for _ in range(10)]
        assert 429 in codes
        limited = await c.post("/api/signin/begin")
        assert limited.status_code == 429
        assert int(limited.headers["retry-after"]) >= 1


async def test_an_invitation_works_once(nats_url: str, tmp_path: Path) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h, client(h) as c:
        link = await invite(h, people, "bob")
        first = await register(c, link, SoftAuthenticator(origin=web_url(h)))
        assert first.status_code == 200
        token = link.rsplit("/", 1)[1]
        assert (await c.post(f"/api/invite/{token}/begin")).status_code == 404
        assert (await c.get(f"/invite/{token}")).status_code == 404


async def test_only_an_admin_invites_others_and_an_invitation_request_is_not_replayable(
    nats_url: str, tmp_path: Path
) -> None:
    people = approvers_policy(tmp_path)
    async with inbox_service(nats_url, tmp_path, people) as h:
        code, _, err = await cli(h, "web", "invite", "alice", "--key", str(people.seeds["bob"]))
        assert code == 2
        assert "may invite only themselves" in err
        assert len(err.strip().splitlines()) == 1
        code, out, _ = await cli(h, "web", "invite", "bob", "--key", str(people.seeds["bob"]))
        assert code == 0
        assert f"{web_url(h)}/invite/" in out
        code, _, err = await cli(h, "web", "invite", "nobody", "--key", str(people.seeds["alice"]))
        assert code == 2
        assert "not an approver in the policy" in err
        key = people.keys["alice"]
        request = WebInvite(
            approver="bob", nonce=uuid.uuid4().hex, issued_at=datetime.now(UTC),
            key=key.public_key,
        )  # fmt: skip
        request = request.model_copy(update={"signature": key.sign(request.signing_payload())})
        subject = h.subjects.api_web("invite")
        reply = await transport.ask(h.nc, subject, request, WebInviteReply)
        assert reply.approver == "bob"
        with pytest.raises(transport.ApiRefused, match="replay"):
            await transport.ask(h.nc, subject, request, WebInviteReply)
        forged = request.model_copy(update={"approver": "alice", "nonce": uuid.uuid4().hex})
        raw = json.loads(forged.model_dump_json())
        answer = json.loads((await h.nc.request(subject, json.dumps(raw).encode())).data)
        assert "not signed" in answer["error"]
