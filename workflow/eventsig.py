"""The service's signature on what it publishes, checked: which key, and whether it signed.

Light (nkeys and PyNaCl, no pydantic or NATS client library), so the SDKs
(`workflow.client.trust`) and the per-call hook path (`workflow.adapters.lite`) check events
and API answers with the same functions; `workflow.signing` makes the signatures.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from pathlib import Path

import nacl.exceptions
import nacl.signing
import nkeys

from workflow.errors import ConfigError, ConnectError
from workflow.nats_target import SERVICE_KEY_FILE, data_dir_from

#: The NATS header carrying the service's signature on what it publishes.
SIGNATURE_HEADER = "Headgate-Signature"
#: The NATS header naming the key that made it (informative: clients check their trusted key).
SIGNER_HEADER = "Headgate-Signer"
_EVENT_DOMAIN = b"headgate-event-v1\n"

#: The environment variable that pins the service's public key.
SERVICE_KEY_ENV = "HEADGATE_SERVICE_KEY"


def event_signing_bytes(subject: str, payload: bytes) -> bytes:
    """What the service signs for a message it publishes: a domain tag, the subject (so an
    event cannot be moved to another agent's or workspace's subject) and the exact payload."""
    return _EVENT_DOMAIN + subject.encode() + b"\n" + payload


def decode_public(public_key: str, letter: str, prefix: int) -> bytes | None:
    """The Ed25519 key inside a public nkey starting with `letter` (56 characters, with its
    checksum), or None when the text is not one."""
    if len(public_key) != 56 or not public_key.startswith(letter):
        return None
    try:
        raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35 or raw[0] != prefix:
        return None
    body, crc = raw[:-2], raw[-2:]
    if nkeys.crc16(bytearray(body)) != int.from_bytes(crc, "little"):
        return None
    return bytes(body[1:])


def decode_server_key(public_key: str) -> bytes | None:
    """The Ed25519 public key inside a public server nkey (``N…``), or None."""
    return decode_public(public_key, "N", nkeys.PREFIX_BYTE_SERVER)


def is_service_key(public_key: str) -> bool:
    return decode_server_key(public_key) is not None


def verify_event(
    public_key: str, subject: str, payload: bytes, headers: Mapping[str, str] | None
) -> bool:
    """True when the message carries `public_key`'s signature over its subject and payload."""
    signature = (headers or {}).get(SIGNATURE_HEADER)
    key = decode_server_key(public_key)
    if not signature or key is None:
        return False
    try:
        nacl.signing.VerifyKey(key).verify(
            event_signing_bytes(subject, payload),
            base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)),
        )
    except (nacl.exceptions.BadSignatureError, binascii.Error, ValueError):
        return False
    return True


def pinned_key(
    key: str | None = None,
    *,
    data_dir: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """The service key given explicitly, in the environment or in the data dir; None if none.

    ConfigError when the one found is not a service key (a typo must not disable the check)."""
    return pinned_key_from(key, data_dir=data_dir, env=env)[0]


def pinned_key_from(
    key: str | None, *, data_dir: Path | str | None, env: Mapping[str, str] | None
) -> tuple[str | None, str]:
    """`pinned_key` and where it was found (for the error that names it)."""
    env = os.environ if env is None else env
    origin = "the service key given"
    if not key:
        key, origin = env.get(SERVICE_KEY_ENV) or None, SERVICE_KEY_ENV
    if not key:
        path = data_dir_from(data_dir, env) / SERVICE_KEY_FILE
        try:
            key, origin = path.read_text().strip() or None, str(path)
        except OSError:
            return None, origin
    if key is not None and not is_service_key(key):
        raise ConfigError(f"{origin} is not a service public key (N…, 56 characters): {key!r}")
    return key, origin


def key_from_answer(
    asked: str, subject: str, data: bytes, headers: Mapping[str, str] | None
) -> str:
    """The service key in an answer on `<prefix>.api.key` (asked on `asked`), which must be
    signed by the key it names; ConnectError otherwise. Only the service answers `api.*` where
    permissions are set: what answered signs too."""
    try:
        found = json.loads(data).get("public_key")
    except (ValueError, AttributeError):
        found = None
    if not isinstance(found, str) or not is_service_key(found):
        raise ConnectError(f"the answer on {asked} is not a service key")
    if not verify_event(found, subject, data, headers):
        raise ConnectError(f"the answer on {asked} is not signed by the key it names")
    return found
