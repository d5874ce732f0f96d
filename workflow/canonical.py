"""The canonical forms signed texts are made of, and the cut-over between them.

Decisions (and passkey invitations) are signed over **RFC 8785**, the JSON Canonicalization
Scheme (JCS): keys sorted by UTF-16 code units, no insignificant whitespace, strings with the
minimal escapes, numbers as ECMAScript prints them. Libraries exist for most languages (and a
browser's ``JSON.stringify`` with sorted keys is it), so an approver written in any language
can produce the exact bytes the service verifies. A signed message says which form it was signed
over in its ``signature_scheme`` field, which is itself signed:

- ``"rfc8785"``: signed over RFC 8785 of every field but the signatures; always accepted.
- absent (legacy): signed over Python's ``json.dumps(sort_keys=True, separators=(",", ":"),
  ensure_ascii=False)``; accepted by Headgate 0.1.x only, refused from `LEGACY_REFUSED_FROM`.

The legacy form is Headgate's own: it differs from RFC 8785 for floats (``1.0``, ``1e-07``)
and for keys outside the Basic Multilingual Plane, and no library outside Python writes it.
Records already accepted (the approvals a release carries, an audit log) stay verifiable offline
in either form: the cut-over applies to *new* signatures, what a live verifier accepts.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import rfc8785

from workflow import __version__

#: The value of ``signature_scheme`` for a text signed over its RFC 8785 form.
SIGNATURE_SCHEME: Literal["rfc8785"] = "rfc8785"
#: The first Headgate version whose verifiers refuse a signature over the legacy form.
LEGACY_REFUSED_FROM = (0, 2)


def jcs(value: Any) -> str:
    """The RFC 8785 canonical form of a JSON value. ValueError when it has none (a float that
    is not finite, an integer beyond 2**53 in magnitude)."""
    try:
        return rfc8785.dumps(value).decode()
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"the value has no RFC 8785 form: {exc}") from exc


def legacy_json(value: Any) -> str:
    """Headgate's own canonical JSON, what decisions were signed over before RFC 8785."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def signed_form(fields: Mapping[str, Any]) -> str:
    """The text a message with these (signed) fields was signed over, by its scheme."""
    if fields.get("signature_scheme") == SIGNATURE_SCHEME:
        return jcs(dict(fields))
    return legacy_json(dict(fields))


def scheme_problem(fields: Mapping[str, Any], version: str = __version__) -> str | None:
    """Why a new signature over `fields` cannot be accepted for its scheme, or None.

    `version` is the verifier's own (a seam for the test of the cut-over)."""
    scheme = fields.get("signature_scheme")
    if scheme == SIGNATURE_SCHEME:
        return None
    if scheme is not None:
        return f"The signature scheme {scheme!r} is unknown; sign over RFC 8785 ('rfc8785')."
    if legacy_accepted(version):
        return None
    return (
        "The decision is signed over the legacy canonical JSON, which Headgate refuses since "
        f"{'.'.join(map(str, LEGACY_REFUSED_FROM))}; sign over RFC 8785 and set "
        "signature_scheme to 'rfc8785'."
    )


def legacy_accepted(version: str = __version__) -> bool:
    """True while a verifier of `version` still accepts signatures over the legacy form."""
    release = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    return release < LEGACY_REFUSED_FROM


def is_signed_form(text: str) -> bool:
    """True when `text` is exactly the canonical form of what it parses to, by the scheme it
    names: so the fields read out of a signed text are the ones that were signed (no duplicate
    keys, nothing a parser could read two ways)."""
    try:
        fields = json.loads(text)
    except ValueError:
        return False
    if not isinstance(fields, dict) or fields.get("signature_scheme") not in (
        None,
        SIGNATURE_SCHEME,
    ):
        return False
    try:
        return signed_form(fields) == text
    except ValueError:
        return False
