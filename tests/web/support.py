"""The web inbox in tests: a real service with `--web-port`, approvers in a policy file,
invitations through the real `headgate web invite`, and Chromium driving the pages."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.service.helpers import Harness, running_service
from tests.support.browser import add_authenticator, wait
from workflow.signing import ApproverKey


@dataclass
class Approvers:
    keys: dict[str, ApproverKey]
    seeds: dict[str, Path]
    policy: Path


def approvers_policy(tmp_path: Path, extra: str = "") -> Approvers:
    """alice (admin) and bob; calls in workspace `prod` need two approvals."""
    keys = {name: ApproverKey.generate() for name in ("alice", "bob")}
    seeds = {}
    for name, key in keys.items():
        seeds[name] = tmp_path / f"{name}.seed"
        key.write(seeds[name])
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f"""
[approvers.alice]
key = "{keys["alice"].public_key}"
roles = ["admin", "approver"]

[approvers.bob]
key = "{keys["bob"].public_key}"
roles = ["approver"]

[workspaces.prod]
approval = {{ quorum = 2 }}
{extra}
"""
    )
    return Approvers(keys, seeds, policy)


@asynccontextmanager
async def inbox_service(
    nats_url: str, tmp_path: Path, people: Approvers, **settings: Any
) -> AsyncIterator[Harness]:
    async with running_service(
        nats_url, tmp_path / "data", policy_path=people.policy, web_port=0, **settings
    ) as h:
        yield h


def web_url(h: Harness) -> str:
    assert h.service.ctx is not None
    assert h.service.ctx.web_url is not None
    return h.service.ctx.web_url


async def cli(h: Harness, *args: str) -> tuple[int, str, str]:
    """Run the real `headgate` command against the harness's service."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "workflow", *args,
        "--nats-url", h.service.url, "--data-dir", str(h.data_dir),
        "--prefix", h.subjects.prefix,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def invite(h: Harness, people: Approvers, name: str, *, by: str = "alice") -> str:
    code, out, err = await cli(h, "web", "invite", name, "--key", str(people.seeds[by]), "--json")
    assert code == 0, err
    link = json.loads(out)["url"]
    assert isinstance(link, str)
    return link


def register(driver: Any, link: str) -> None:
    """Open an invitation in this browser and register a passkey on its authenticator."""
    from selenium.webdriver.common.by import By

    origin = link.split("/invite/")[0]
    driver.get(origin + "/signin")  # an authenticator is added to the page's origin
    add_authenticator(driver)
    driver.get(link)
    button = driver.find_element(By.ID, "register")
    assert "passkey" in button.text.lower()
    button.click()
    wait(driver, lambda d: d.current_url == origin + "/")


def item(driver: Any, request_id: str) -> Any:
    from selenium.webdriver.common.by import By

    found = wait(driver, lambda d: d.find_elements(By.ID, f"rq-{request_id}"))
    return found[0]


def status_of(driver: Any, request_id: str) -> str:
    """Wait until the page says what became of the decision on `request_id`; return that."""
    from selenium.webdriver.common.by import By

    seen: list[str] = []

    def said(d: Any) -> str | bool:
        # The flash line outlives the item, which leaves the inbox once it is decided.
        text = d.find_element(By.ID, "flash").text
        seen.append(text)
        done = text.startswith(("Approved", "Rejected", "Refused", "Not sent"))
        return text if done and request_id in text else False

    try:
        return str(wait(driver, said))
    except Exception as exc:
        raise AssertionError(f"the decision's status stayed {seen[-1:]!r}") from exc


def post_json(driver: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST from the page itself: the session cookie, the CSRF token and the Origin of a real
    browser request."""
    script = """
      const [path, body, done] = arguments;
      const csrf = document.querySelector('meta[name="csrf-token"]').content;
      fetch(path, {method: "POST", credentials: "same-origin",
                   headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
                   body: JSON.stringify(body)})
        .then(r => r.json().then(j => done({status: r.status, body: j})));
    """
    result = driver.execute_async_script(script, path, body)
    assert isinstance(result, dict)
    return result
