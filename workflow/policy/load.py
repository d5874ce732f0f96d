"""Reading a policy: TOML text or a file -> a validated `Policy`, or a `PolicyValidationError`
naming the file, the line, the key path and what is wrong (every problem found, field types
and `workflow.policy.rules` alike)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workflow.policy.model import Policy
from workflow.policy.problems import PolicyProblem, PolicyValidationError
from workflow.policy.rules import policy_problems
from workflow.policy.source import error_message, error_path, render_key


def validate_policy(data: Any) -> Policy:
    """A policy from parsed data: field types first, then the policy rules.

    Raises `PolicyValidationError` without line numbers (`load_policy_text` adds them).
    """
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyValidationError(
            [
                PolicyProblem(
                    key=render_key(error_path(err["loc"])) or "(top level)",
                    message=error_message(Policy, err),
                    path=tuple(error_path(err["loc"])),
                )
                for err in exc.errors()
            ]
        ) from None
    problems = policy_problems(policy)
    if problems:
        raise PolicyValidationError(problems)
    return policy


def load_policy_text(text: str, source: str = "<policy>") -> Policy:
    """Parse and validate a policy. Raises `PolicyValidationError` (a `PolicyError`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(str(exc), source) from None
    try:
        return validate_policy(data)
    except PolicyValidationError as exc:
        raise exc.located(text, source) from None


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PolicyValidationError(
            [PolicyProblem("(file)", f"the policy file cannot be read: {reason}")],
            source=str(path),
        ) from None
    except UnicodeDecodeError:
        raise PolicyValidationError(
            [PolicyProblem("(file)", "the policy file is not UTF-8 text")], source=str(path)
        ) from None
    return load_policy_text(text, str(path))


def _syntax_error(message: str, source: str) -> PolicyValidationError:
    line: int | None = None
    m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if m:
        line = int(m.group(1))
        message = message[: m.start()] + f" (column {m.group(2)})"
    elif m2 := re.search(r"\s*\(at end of document\)$", message):
        message = message[: m2.start()] + " (at the end of the file)"
    return PolicyValidationError(
        [PolicyProblem("(syntax)", f"the file is not valid TOML: {message}", line)], source=source
    )
