"""A running `serve` applies `headgate agents add/remove` without a restart.

Every second (and at once on SIGHUP) the service looks at the registered agents
(`workflow.agent_identities`); when they changed it rewrites the embedded server's account
config, has nats-server reload it (SIGHUP to the server, confirmed by its `config_load_time`
on the monitoring port: nats-server applies new permissions to connections already open, and
closes those whose user is gone), hands the HTTP hooks the agents' tokens, and records what it
applied in `nats/agents.json`, where `headgate agents add` waits for it. Without an embedded
server (`--nats-url`) only the hook tokens change: NATS users are the operator's there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from workflow import agent_identities
from workflow.agent_identities import Fingerprint
from workflow.errors import HeadgateError
from workflow.service.embedded import EmbeddedNats
from workflow.service.embedded_access import prepare_access
from workflow.subjects import Subjects

log = logging.getLogger("headgate")

#: Seconds between two looks at the registered agents.
POLL = 1.0
#: Seconds nats-server may take to reload its config.
RELOAD_TIMEOUT = 10.0


class AgentAccess:
    """Keeps the embedded server's users and the hook tokens in step with the registry."""

    def __init__(
        self,
        data_dir: Path,
        subjects: Subjects,
        *,
        server: EmbeddedNats | None,
        shared_agent: bool,
        on_tokens: Callable[[dict[str, str]], None] | None = None,
        loaded: Fingerprint | None = None,
    ) -> None:
        """`loaded`: the registry as it was when the embedded server read its config."""
        self.data_dir, self.subjects = data_dir, subjects
        self.server, self.shared_agent = server, shared_agent
        self.on_tokens = on_tokens
        self.seen: Fingerprint | None = None
        self.loaded = loaded
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def wake(self) -> None:
        """Look now (SIGHUP)."""
        self._wake.set()

    async def apply(self, reason: str) -> bool:
        """Apply the registry as it is now; False (logged) when nats-server did not reload."""
        async with self._lock:
            seen = agent_identities.fingerprint(self.data_dir)
            agents: dict[str, str] = {}
            if self.server is not None:
                store = self.server.store_dir
                access = await asyncio.to_thread(
                    prepare_access, self.data_dir, store, self.subjects,
                    shared_agent=self.shared_agent,
                )  # fmt: skip
                agents = dict(access.agents)
                if self.seen is not None or seen != self.loaded:  # else it read this at start
                    try:
                        await asyncio.to_thread(reload_server, self.server)
                    except HeadgateError as exc:
                        # Not again every second: at the next change, or on SIGHUP.
                        self.seen = seen
                        log.error(
                            "registered agents not applied (%s): %s; SIGHUP tries again",
                            reason, exc,
                        )  # fmt: skip
                        return False
            tokens = await asyncio.to_thread(agent_identities.hook_tokens, self.data_dir)
            if self.on_tokens is not None:
                self.on_tokens(tokens)
            self.seen = seen
            agent_identities.record_applied(
                self.data_dir,
                agent_identities.Applied(
                    os.getpid(), agents, tuple(sorted(tokens)), self.server is not None,
                    self.shared_agent,
                ),
            )  # fmt: skip
            log.info(
                "registered agents (%s): %s%s", reason, ", ".join(sorted(tokens)) or "none",
                "" if self.shared_agent or self.server is None else "; no shared agent user",
            )  # fmt: skip
            return True

    async def watch(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL)
            reason = "SIGHUP" if self._wake.is_set() else "changed"
            self._wake.clear()
            if stopping.is_set():
                return
            now = await asyncio.to_thread(agent_identities.fingerprint, self.data_dir)
            if now != self.seen or reason == "SIGHUP":
                await self.apply(reason)


def reload_server(server: EmbeddedNats, timeout: float = RELOAD_TIMEOUT) -> None:
    """Have the embedded nats-server reload its config and wait until it has (its monitoring
    endpoint reports a newer `config_load_time`)."""
    if server.process is None or server.process.poll() is not None:
        raise HeadgateError("the embedded nats-server is not running")
    before = _config_load_time(server)
    server.process.send_signal(signal.SIGHUP)
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if _config_load_time(server) != before:
            return
        time.sleep(0.01)
    tail = ""
    log_file = server.store_dir / "nats-server.log"
    with contextlib.suppress(OSError):
        tail = log_file.read_text()[-500:]
    raise HeadgateError(f"nats-server did not reload its config within {timeout:g}s {tail}")


def _config_load_time(server: EmbeddedNats) -> str:
    if not server.monitor_url:
        raise HeadgateError("the embedded nats-server has no monitoring port to confirm a reload")
    with urllib.request.urlopen(f"{server.monitor_url}/varz", timeout=2) as answer:
        return str(json.loads(answer.read())["config_load_time"])
