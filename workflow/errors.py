"""One root exception; subclasses carry the fields their message is built from."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no pydantic import for a command that only prints an error
    from pydantic import ValidationError


class HeadgateError(Exception):
    """Root of every error Headgate raises on purpose. Its message is meant for a human."""


class ConfigError(HeadgateError):
    """A setting, a policy file or a command-line option is wrong."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        self.source = source
        self.key = key
        where = ": ".join(part for part in (source, key) if part)
        super().__init__(f"{where}: {message}" if where else message)


class PolicyError(ConfigError):
    """The policy file is invalid (file, key path and what is wrong)."""


class NotFoundError(HeadgateError):
    def __init__(self, what: str, ident: str):
        self.what = what
        self.ident = ident
        super().__init__(f"no {what} with id {ident!r}")


class ConnectError(HeadgateError):
    """NATS or the database cannot be reached."""


def describe_invalid(exc: ValidationError, *, limit: int = 5) -> str:
    """The problems of a validation error as one line: 'tool: Field required; colour: …'."""
    parts = [
        f"{'.'.join(map(str, err['loc'])) or '(message)'}: {err['msg']}"
        for err in exc.errors()[:limit]
    ]
    more = f" (and {exc.error_count() - limit} more)" if exc.error_count() > limit else ""
    return "; ".join(parts) + more
