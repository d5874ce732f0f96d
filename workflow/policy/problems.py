"""What is wrong with a policy: problems with their key path and line, and the error."""

from __future__ import annotations

from dataclasses import dataclass

from workflow.errors import PolicyError
from workflow.policy.source import locate


@dataclass(frozen=True)
class PolicyProblem:
    """One thing wrong with a policy: where (key path, line) and what, as a sentence."""

    key: str
    message: str
    line: int | None = None
    path: tuple[str, ...] = ()

    def render(self, source: str | None) -> str:
        where = ", ".join(
            part
            for part in (
                source,
                f"line {self.line}" if self.line else None,
                None if self.key.startswith("(") else f"key {self.key}",
            )
            if part
        )
        return f"{where}: {self.message}"


class PolicyValidationError(PolicyError):
    """The policy is invalid; `problems` lists everything found, the message shows them all."""

    def __init__(self, problems: list[PolicyProblem], *, source: str | None = None):
        self.problems = problems
        super().__init__(problems[0].message, source=source, key=problems[0].key)
        self.line = problems[0].line
        lines = [p.render(source) for p in problems]
        if len(lines) > 1:
            lines.insert(0, f"The policy has {len(lines)} problems:")
        self.args = ("\n".join(lines),)

    def located(self, text: str, source: str) -> PolicyValidationError:
        """The same problems with the file name and the line of each key."""
        return PolicyValidationError(
            [
                PolicyProblem(
                    p.key, p.message, p.line or locate(text, p.path or p.key.split(".")), p.path
                )
                for p in self.problems
            ],
            source=source,
        )
