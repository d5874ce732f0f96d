"""Grants: an approver's signed "approve calls like this one until then". Pure.

A grant replaces one approval, never a policy. It can turn a `require_approval` verdict into a
release only when all of these hold (`grant_release`):

- the verdict asks for exactly one approval: not a denial, not quorum > 1 nor four-eyes;
- the call is not destructive (class or category), not critical, not fail-closed;
- the grant is live: not revoked, not expired, not used up;
- its scope covers the call: same tool and workspace (and agent, if it names one), and
  - `command-prefix`: the command is one simple command of literal words
    (`workflow.classify.simple`) whose argv starts with the prefix, word for word;
  - `path`: the call has path arguments and every one matches the glob;
  - `tool`: any call of the tool that carries no command;
- its approver is still registered under the key that signed it and may approve this very
  call (workspace, roles of the call's requirement, not running the agent): the same rules as
  a decision (`workflow.approvals.ineligibility`).

The use itself is counted by the store (atomically: two replicas cannot overspend a grant);
this module only decides whether a grant may be used, and what the release's verdict says.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from workflow.approvals import ApproverDirectory, ineligibility
from workflow.classify.arguments import PATH_KEYS
from workflow.classify.simple import simple_argv, starts_with
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.controls import GrantScope
from workflow.messages import Classification, Decision, Proposal, TrailStep, Verdict

#: The arguments a shell-like tool carries its command in (as the classifier reads them).
COMMAND_KEYS = ("command", "cmd", "argv", "args")
_PATH_SUFFIXES = ("_path", "_paths", "_file", "_files", "_dir", "_directory", "_filename")


@dataclass(frozen=True, slots=True)
class GrantTerms:
    """A stored grant, as the deciding code sees it."""

    grant_id: str
    approver: str
    key: str
    tool: str
    workspace: str
    agent: str | None
    scope: GrantScope
    command_prefix: tuple[str, ...] | None
    path_glob: str | None
    expires_at: datetime
    max_uses: int | None = None
    uses: int = 0
    revoked: bool = False
    session_id: str | None = None

    def describe(self) -> str:
        if self.scope is GrantScope.COMMAND_PREFIX:
            what = f"commands starting with `{' '.join(self.command_prefix or ())}`"
        elif self.scope is GrantScope.PATH:
            what = f"paths matching `{self.path_glob}`"
        else:
            what = "any call of the tool"
        who = f"agent {self.agent}" if self.agent else "any agent"
        if self.session_id:
            who += f" (session {self.session_id})"
        return f"`{self.tool}`, {what}, for {who} in workspace {self.workspace}"


def not_grantable(classification: Classification, verdict: Verdict) -> str | None:
    """Why no grant may release a call with this classification and verdict, or None."""
    if verdict.decision is not Decision.REQUIRE_APPROVAL or verdict.requirement is None:
        return f"the policy's decision is {verdict.decision}, and a grant only replaces an approval"
    if (
        classification.risk_class is RiskClass.DESTRUCTIVE
        or Category.DESTRUCTIVE in classification.categories
    ):
        return "the call is destructive"
    if classification.severity is Severity.CRITICAL:
        return "the call is critical"
    if classification.fail_closed:
        return "the classifier failed closed on the call"
    if verdict.requirement.approvals_needed > 1:
        return (
            f"the policy asks for {verdict.requirement.approvals_needed} approvals "
            "(quorum or four-eyes), and a grant stands for one"
        )
    return None


def live_problem(grant: GrantTerms, now: datetime) -> str | None:
    """Why the grant can release nothing now, or None."""
    if grant.revoked:
        return f"grant {grant.grant_id} was revoked"
    if now >= grant.expires_at:
        return f"grant {grant.grant_id} expired at {grant.expires_at.isoformat()}"
    if grant.max_uses is not None and grant.uses >= grant.max_uses:
        return f"grant {grant.grant_id} is used up ({grant.uses} of {grant.max_uses})"
    return None


def command_of(arguments: Mapping[str, Any]) -> str | list[str] | None:
    """The command a call carries (the first of `COMMAND_KEYS` with a string or argv)."""
    for key in COMMAND_KEYS:
        value = arguments.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value
    return None


def _carries_command(arguments: Mapping[str, Any]) -> bool:
    return any(key in arguments for key in COMMAND_KEYS)


def path_arguments(arguments: Mapping[str, Any]) -> list[Any]:
    """Every value of a path-like argument (lists flattened), as given."""
    found: list[Any] = []
    for key, value in arguments.items():
        if key.lower() in PATH_KEYS or key.lower().endswith(_PATH_SUFFIXES):
            found.extend(value if isinstance(value, list) else [value])
    return found


@lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    """`**` crosses directories, `*` and `?` do not; everything else is literal."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def normal_path(raw: str, cwd: str | None) -> str | None:
    """A path made absolute (from `cwd`) and normalised; None when it climbs out with `..`
    or cannot be read literally (home, variables)."""
    if not raw or raw.startswith(("~", "$")) or "\x00" in raw:
        return None
    if not raw.startswith("/"):
        if cwd is None or not cwd.startswith("/"):
            return None
        raw = posixpath.join(cwd, raw)
    if ".." in raw.split("/"):
        return None
    path = posixpath.normpath(raw)
    return "/" + path.lstrip("/")


def scope_problem(grant: GrantTerms, proposal: Proposal) -> str | None:
    """Why the grant's scope does not cover the call, or None when it does."""
    if proposal.tool != grant.tool:
        return f"the grant is for `{grant.tool}`, the call is `{proposal.tool}`"
    if proposal.workspace != grant.workspace:
        return f"the grant is for workspace {grant.workspace}"
    if grant.agent is not None and proposal.agent != grant.agent:
        return f"the grant is for agent {grant.agent}"
    session = proposal.context.session_id if proposal.context else None
    if grant.session_id is not None and session != grant.session_id:
        return f"the grant is for session {grant.session_id}"
    args = proposal.arguments
    if grant.scope is GrantScope.COMMAND_PREFIX:
        command = command_of(args)
        argv = simple_argv(command) if command is not None else None
        if argv is None:
            return (
                "the call is not one simple command (a list, pipeline, redirection or "
                "substitution never matches a command grant)"
            )
        if not starts_with(argv, grant.command_prefix or ()):
            return f"the command does not start with `{' '.join(grant.command_prefix or ())}`"
        return None
    if _carries_command(args):
        return "the call carries a command, which only a command-prefix grant may cover"
    if grant.scope is GrantScope.PATH:
        paths = path_arguments(args)
        if not paths or grant.path_glob is None:
            return "the call names no path"
        cwd = proposal.context.cwd if proposal.context else None
        pattern = _glob(grant.path_glob)
        for raw in paths:
            path = normal_path(raw, cwd) if isinstance(raw, str) else None
            if path is None or not pattern.match(path):
                return f"the path {raw!r} is not under `{grant.path_glob}`"
    return None


@dataclass(frozen=True, slots=True)
class GrantRelease:
    """A grant that may release the call, and the verdict the release carries."""

    grant: GrantTerms
    verdict: Verdict


def grant_release(
    proposal: Proposal,
    classification: Classification,
    verdict: Verdict,
    grants: Iterable[GrantTerms],
    approvers: ApproverDirectory,
    now: datetime,
) -> GrantRelease | None:
    """The first grant (soonest to expire) that may release this call, or None."""
    if not_grantable(classification, verdict) is not None:
        return None
    assert verdict.requirement is not None
    for grant in sorted(grants, key=lambda g: (g.expires_at, g.grant_id)):
        if live_problem(grant, now) is not None or scope_problem(grant, proposal) is not None:
            continue
        found = approvers.approver_by_key(grant.key)
        if found is None or found[0] != grant.approver:
            continue
        name, profile = found
        if ineligibility(name, profile, proposal.workspace, proposal.agent, verdict.requirement):
            continue
        return GrantRelease(grant, granted_verdict(verdict, grant))
    return None


def granted_verdict(verdict: Verdict, grant: GrantTerms) -> Verdict:
    """The held verdict turned into an allow that names the grant."""
    uses = f"use {grant.uses + 1}" + (f" of {grant.max_uses}" if grant.max_uses else "")
    reason = (
        f"Released by grant {grant.grant_id} from {grant.approver} ({grant.describe()}; "
        f"{uses}, until {grant.expires_at.isoformat()}); without it the call would need approval."
    )
    return Verdict(
        decision=Decision.ALLOW,
        reason=reason,
        requirement=None,
        trail=[*verdict.trail, TrailStep(step="grant", decision=Decision.ALLOW, message=reason)],
        policy_revision=verdict.policy_revision,
    )


def default_prefix(arguments: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The argv a command grant made from this call covers by default: the call's own argv."""
    command = command_of(arguments)
    return simple_argv(command) if command is not None else None


def default_glob(arguments: Mapping[str, Any], cwd: str | None) -> str | None:
    """The glob a path grant made from this call covers by default: the directory of its
    (single) path, and everything under it."""
    paths = [p for p in path_arguments(arguments) if isinstance(p, str)]
    normal = [normal_path(p, cwd) for p in paths]
    if len(normal) != 1 or normal[0] is None:
        return None
    directory = posixpath.dirname(normal[0])
    return f"{directory.rstrip('/')}/**"
