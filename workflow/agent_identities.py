"""Registered agents: one NATS user and one HTTP hook token per agent, in the data dir.

`headgate agents add NAME` writes, in the credentials dir (0700):

| file | what | used by |
|---|---|---|
| `credentials/agents/NAME.nk` | NAME's nkey seed (0600) | clients running as NAME |
| `credentials/agents/NAME.token` | NAME's HTTP hook token (0600) | `serve --hook-listen` |

The embedded server gives NAME a user of its own and denies NAME's subjects to the shared agent
user (`workflow.service.embedded_access`); the HTTP hooks take only NAME's token for
`?agent=NAME`. A running `serve` picks up a change within a second
(`workflow.service.agent_access`) and then records what it applied in `nats/agents.json`,
which `agents add` and `agents list` read back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from workflow.errors import ConfigError
from workflow.nats_target import AGENT_NAME, AGENTS_DIR, CREDENTIALS_DIR, Role
from workflow.nats_target import agent_credentials_file as agent_credentials_file

#: The names the roles' own users already use as their inbox prefix (`_INBOX.<role>`).
RESERVED = frozenset(role.value for role in Role)
#: What the running service applied last (in the embedded server's store dir).
APPLIED_FILE = Path("nats") / "agents.json"


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    name: str
    seed: Path
    token: Path
    public_key: str


def agents_dir(data_dir: Path) -> Path:
    return data_dir / CREDENTIALS_DIR / AGENTS_DIR


def token_file(data_dir: Path, name: str) -> Path:
    return agents_dir(data_dir) / f"{name}.token"


def check_name(name: str) -> str:
    """`name` if it can be an agent's identity, else a `ConfigError` saying why not."""
    if not AGENT_NAME.fullmatch(name):
        raise ConfigError(
            f"the agent name {name!r} is not valid: use 1 to 64 letters, digits, '-' or '_' "
            "(it is a NATS subject token, as in --agent)"
        )
    if name in RESERVED:
        raise ConfigError(
            f"the agent name {name!r} is taken by a role of the embedded server "
            f"({', '.join(sorted(RESERVED))}); choose another"
        )
    return name


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def add(data_dir: Path, name: str) -> AgentIdentity:
    """Register `name`: its nkey seed and hook token, both 0600. A `ConfigError` for a bad
    name or one already registered (nothing is overwritten)."""
    from workflow.datadir import make_private
    from workflow.signing import ApproverKey

    check_name(name)
    make_private(data_dir)
    _private_dir(data_dir / CREDENTIALS_DIR)
    _private_dir(agents_dir(data_dir))
    seed, token = agent_credentials_file(data_dir, name), token_file(data_dir, name)
    if seed.exists():
        raise ConfigError(
            f"the agent {name!r} is already registered ({seed}); `headgate agents remove "
            f"{name}` first to give it new credentials"
        )
    key = ApproverKey.generate()
    token.unlink(missing_ok=True)  # left over from an interrupted add: a new one
    _write_private(token, os.urandom(32).hex() + "\n")
    tmp = seed.with_name(f".{name}.nk.partial")  # the seed last: its presence registers
    tmp.unlink(missing_ok=True)
    key.write(tmp)
    tmp.replace(seed)
    return AgentIdentity(name, seed, token, key.public_key)


def remove(data_dir: Path, name: str) -> None:
    check_name(name)
    seed = agent_credentials_file(data_dir, name)
    if not seed.exists():
        known = ", ".join(sorted(registered(data_dir))) or "none"
        raise ConfigError(f"no agent {name!r} is registered in {data_dir} (registered: {known})")
    seed.unlink()
    token_file(data_dir, name).unlink(missing_ok=True)


def registered(data_dir: Path) -> dict[str, AgentIdentity]:
    """The registered agents by name (a file that is not a valid seed is skipped)."""
    from workflow.signing import ApproverKey

    found: dict[str, AgentIdentity] = {}
    try:
        seeds = sorted(agents_dir(data_dir).glob("*.nk"))
    except OSError:
        return found
    for seed in seeds:
        name = seed.stem
        if not AGENT_NAME.fullmatch(name) or name in RESERVED:
            continue
        try:
            key = ApproverKey.from_file(seed)
        except (OSError, ConfigError):
            continue
        found[name] = AgentIdentity(name, seed, token_file(data_dir, name), key.public_key)
    return found


Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(data_dir: Path) -> Fingerprint:
    """What changes when an agent is added or removed (names, sizes, modification times)."""
    try:
        entries = sorted(agents_dir(data_dir).iterdir())
    except OSError:
        return ()
    out = []
    for entry in entries:
        try:
            st = entry.stat()
        except OSError:
            continue
        out.append((entry.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def hook_tokens(data_dir: Path) -> dict[str, str]:
    """Each registered agent's HTTP hook token."""
    tokens = {}
    for name, found in registered(data_dir).items():
        try:
            tokens[name] = found.token.read_text().strip()
        except OSError:
            continue
    return {name: token for name, token in tokens.items() if token}


@dataclass(frozen=True, slots=True)
class Applied:
    """What a running service last applied (`nats/agents.json`)."""

    pid: int
    #: name -> public key of the agents with their own NATS user (empty without an embedded
    #: server: there, NATS users are the operator's; the HTTP hook tokens still apply).
    agents: dict[str, str]
    hook_agents: tuple[str, ...]
    embedded: bool
    shared_agent: bool


def record_applied(data_dir: Path, applied: Applied) -> None:
    path = data_dir / APPLIED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "pid": applied.pid, "agents": applied.agents, "hook_agents": list(applied.hook_agents),
        "embedded": applied.embedded, "shared_agent": applied.shared_agent,
    }  # fmt: skip
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(body, indent=2) + "\n")
    partial.replace(path)


def read_applied(data_dir: Path) -> Applied | None:
    try:
        body = json.loads((data_dir / APPLIED_FILE).read_text())
        return Applied(
            int(body["pid"]), dict(body["agents"]), tuple(body.get("hook_agents", ())),
            bool(body["embedded"]), bool(body["shared_agent"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None
