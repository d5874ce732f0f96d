"""Secrets masked in text and in JSON-like values: argument names that hold secrets, values
that look like credentials. Pure functions, used where reasons are built (the classifier) and
wherever a human or a notifier reads a call."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "••••"

#: Argument names whose values are secrets whatever they look like (compared without case,
#: `-` and `_`, so `api-key`, `API_KEY` and `apiKey` all match).
_SECRET_KEY_WORDS = (
    "password", "passwd", "passphrase", "secret", "token", "apikey", "authorization", "auth",
    "credential", "credentials", "privatekey", "accesskey", "secretkey", "cookie", "sessionid",
    "clientsecret", "signingkey", "seed",
)  # fmt: skip
_SECRET_KEY_EXACT = ("pwd", "pat", "key", "otp")

# Values that look like credentials, wherever they appear (also inside a shell command).
_VALUE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # "Authorization: Bearer abc", "bearer abc", "Basic dXNlcjpw"
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1\2{MASK}"),
    # JWT: three base64url segments, the first two starting with '{"' encoded (eyJ)
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), MASK),
    # PEM private keys
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
        ),
        f"-----BEGIN PRIVATE KEY-----{MASK}",
    ),
    # Well-known key formats: OpenAI/Anthropic, GitHub, Slack, AWS, Google, Stripe, nkeys seeds
    (re.compile(r"\b(sk-(?:ant-|proj-)?)[A-Za-z0-9_-]{16,}"), rf"\1{MASK}"),
    (re.compile(r"\b(gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,}"), rf"\1{MASK}"),
    (re.compile(r"\b(xox[abposr]-)[A-Za-z0-9-]{10,}"), rf"\1{MASK}"),
    (re.compile(r"\b((?:AKIA|ASIA)[0-9A-Z]{16})\b"), MASK),
    (re.compile(r"\b(AIza)[0-9A-Za-z_-]{30,}"), rf"\1{MASK}"),
    (re.compile(r"\b((?:sk|rk|pk)_(?:live|test)_)[0-9A-Za-z]{10,}"), rf"\1{MASK}"),
    (re.compile(r"\bS[UOAC][A-Z2-7]{50,}\b"), MASK),
    # key=value / key: value pairs inside a string: password=..., --token ..., api_key: ...
    (
        re.compile(
            r"(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|auth)"
            r"[\"']?\s*(?:=|:|\s)\s*[\"']?)(?!••••)[^\s\"'`&;,]{4,}"
        ),
        rf"\1{MASK}",
    ),
    # curl/wget-style credentials: -u user:password, --user=user:password
    (
        re.compile(r"""((?:^|[\s'"])(?:-u|--user|--proxy-user)(?:\s+|=)['"]?[^\s:'"]+:)[^\s'"]+"""),
        rf"\1{MASK}",
    ),
    # user:password@host in URLs
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), rf"\1{MASK}@"),
)
# A long run of key-ish characters mixing upper case, lower case and digits.
_OPAQUE = re.compile(r"[A-Za-z0-9_+=-]{32,}")


def is_secret_key(name: str) -> bool:
    """True for an argument name that holds a secret (`password`, `api_key`, `Authorization`…)."""
    norm = re.sub(r"[^a-z0-9]", "", name.lower())
    return norm in _SECRET_KEY_EXACT or any(word in norm for word in _SECRET_KEY_WORDS)


def _looks_opaque(token: str) -> bool:
    return (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
    )


def mask_text(text: str) -> str:
    """`text` with every credential-looking value replaced by ••••; the rest stays readable."""
    for pattern, replacement in _VALUE_PATTERNS:
        text = pattern.sub(replacement, text)
    return _OPAQUE.sub(lambda m: MASK if _looks_opaque(m.group(0)) else m.group(0), text)


def _maskable(value: Any) -> bool:
    return bool(value) and not isinstance(value, bool | int | float)


def mask_secrets(value: Any) -> Any:
    """A copy of a JSON-like value with secrets masked, by key name and by what values look like."""
    if isinstance(value, Mapping):
        # Numbers and flags under a secret-sounding name (max_tokens: 100) stay readable.
        return {
            k: (MASK if is_secret_key(str(k)) and _maskable(v) else mask_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_secrets(v) for v in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


__all__ = ["MASK", "is_secret_key", "mask_secrets", "mask_text"]
