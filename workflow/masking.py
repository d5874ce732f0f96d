"""Masking secrets in text a person reads: pure functions, shared by the classifier (its
reasons are built from masked text), the service (the audit keeps masked copies) and every
client view (`workflow.client.display` re-exports them).

A value is masked by what it looks like (a bearer token, a JWT, a PEM key, a cloud key, a
`password=` pair, a URL's userinfo, a long opaque token) and, in a JSON object, by the name it
is given (`password`, `api_key`, `Authorization`…). Masking is idempotent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflow.messages import Proposal, Reason

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
    # a password glued to -p (mysql, mariadb and their tools) or after sshpass -p
    (
        re.compile(r"(\b(?:mysql\w*|mariadb\w*)\b[^|;&\n]*?\s-p)(?=[^\s-])[^\s'\"|;&]+"),
        rf"\1{MASK}",
    ),
    (re.compile(r"(\bsshpass\s+-p\s*)[^\s'\"]+"), rf"\1{MASK}"),
    # user:password@host in URLs
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), rf"\1{MASK}@"),
)
# A long run of key-ish characters mixing upper case, lower case and digits.
_OPAQUE = re.compile(r"[A-Za-z0-9_+=-]{32,}")


@functools.lru_cache(maxsize=4096)
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


#: Every pattern above needs one of these (in lower case) or a long opaque run: a text with
#: none of them is returned as it is without running the patterns (the classifier masks every
#: reason it gives, so this is on the service's hot path).
_CLUES = (
    "bearer", "basic", "token", "eyj", "-----begin", "sk-", "ghp_", "gho_", "ghu_", "ghs_",
    "ghr_", "github_pat_", "xox", "akia", "asia", "aiza", "_live_", "_test_", "passw", "pwd",
    "secret", "key", "auth", "-u", "mysql", "mariadb", "sshpass",
)  # fmt: skip


def _may_hold_secret(text: str) -> bool:
    low = text.lower()
    for clue in _CLUES:  # a loop, not any() over a generator: a third less, several per call
        if clue in low:
            return True
    return ("://" in low and "@" in low) or _OPAQUE.search(text) is not None  # URL userinfo


def mask_text(text: str) -> str:
    """`text` with every credential-looking value replaced by ••••; the rest stays readable."""
    if not _may_hold_secret(text):
        return text
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


def secrets_of(value: Any) -> set[str]:
    """Every secret in a JSON-like value, as it appears there: the parts `mask_secrets` would
    hide (a token after `Bearer`, a URL's password, a value under a secret-sounding name…).

    Text derived from the value (a reason quoting a command, cut or rearranged) is masked with
    them by `mask_known`, which catches what a pattern alone would miss there (the userinfo of
    a URL quoted without its scheme, say)."""
    found: set[str] = set()
    _collect(value, found)
    return {s for s in found if len(s) >= _SHORTEST_SECRET}


_SHORTEST_SECRET = 4


def _collect(value: Any, found: set[str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if is_secret_key(str(k)) and isinstance(v, str):
                found.add(v)
            _collect(v, found)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect(v, found)
    elif isinstance(value, str) and _may_hold_secret(value):
        for pattern, replacement in _VALUE_PATTERNS:
            before, _, after = replacement.partition(MASK)
            for m in pattern.finditer(value):
                whole, head, tail = m.group(0), m.expand(before), m.expand(after)
                if (
                    whole.startswith(head)
                    and whole.endswith(tail)
                    and len(head) + len(tail) < len(whole)
                ):
                    found.add(whole[len(head) : len(whole) - len(tail)])
                else:
                    found.add(whole)
        found.update(m.group(0) for m in _OPAQUE.finditer(value) if _looks_opaque(m.group(0)))


def mask_known(text: str, secrets: set[str]) -> str:
    """`text` with each of `secrets` masked wherever it appears, whole or cut short by a `…`
    (a quote shortened for display), then masked by pattern as `mask_text` does."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
        head, tail = secret[:_SHORTEST_SECRET], secret[-_SHORTEST_SECRET:]
        if "…" in text and (head in text or tail in text):
            for cut in range(len(secret) - 1, _SHORTEST_SECRET - 1, -1):
                if secret[:cut] + "…" in text:
                    text = text.replace(secret[:cut] + "…", MASK + "…")
                if "…" + secret[-cut:] in text:
                    text = text.replace("…" + secret[-cut:], "…" + MASK)
    return mask_text(text)


def masked_reasons(reasons: list[Reason], proposal: Proposal | None = None) -> list[Reason]:
    """Classification reasons with their messages masked (the rule ids stay): by pattern, and
    for every secret of `proposal`'s arguments and intent wherever a message quotes it."""
    if proposal is not None and not _any_secret(proposal):
        # Secrets come from the proposal: a reason can only quote what it holds. With nothing
        # secret-looking in it (the common case), the messages are kept as they are.
        return reasons
    known = secrets_of([proposal.arguments, proposal.intent or ""]) if proposal else set()
    out = []
    for reason in reasons:
        message = mask_known(reason.message, known)
        out.append(
            reason if message == reason.message else reason.model_copy(update={"message": message})
        )
    return out


def _any_secret(proposal: Proposal) -> bool:
    """Whether anything in the proposal's arguments or intent may be a secret: a value under a
    secret-sounding name, or text with one of the clues every value pattern needs."""
    return _holds_secret(proposal.arguments) or _may_hold_secret(proposal.intent or "")


def _holds_secret(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(
            (is_secret_key(str(k)) and isinstance(v, str) and v) or _holds_secret(v)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_holds_secret(v) for v in value)
    return isinstance(value, str) and _may_hold_secret(value)


def masked_proposal(proposal: Proposal) -> dict[str, Any]:
    """The proposal as JSON with its arguments and intent masked: the copy kept where the real
    one is not needed (the audit log keeps it beside the real proposal's digest)."""
    body = proposal.model_dump(mode="json", exclude_none=True)
    body["arguments"] = mask_secrets(body.get("arguments", {}))
    if body.get("intent"):
        body["intent"] = mask_text(body["intent"])
    return body


#: Audit fields holding text a person wrote or a tool printed; the rest (keys, signatures, the
#: signed decision itself) is verification material and stays as it is.
_AUDIT_TEXT = ("message", "reason", "summary", "error")


def masked_audit_data(data: dict[str, Any]) -> dict[str, Any]:
    """An audit record's data as a person may read it (`audit tail`, with `--json` too): the
    proposal's arguments and intent, classification reasons and free text masked. Records
    written before the audit kept masked proposals are masked here as well."""
    out = {
        k: mask_text(v) if k in _AUDIT_TEXT and isinstance(v, str) else v for k, v in data.items()
    }
    proposal = out.get("proposal")
    if isinstance(proposal, dict):
        proposal = {**proposal, "arguments": mask_secrets(proposal.get("arguments", {}))}
        if isinstance(proposal.get("intent"), str):
            proposal["intent"] = mask_text(proposal["intent"])
        out["proposal"] = proposal
    classification = out.get("classification")
    if isinstance(classification, dict) and isinstance(classification.get("reasons"), list):
        out["classification"] = {
            **classification,
            "reasons": [
                {**r, "message": mask_text(r["message"])}
                if isinstance(r, dict) and isinstance(r.get("message"), str)
                else r
                for r in classification["reasons"]
            ],
        }
    return out
