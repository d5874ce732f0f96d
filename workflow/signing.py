"""Approver keys and decision signatures: Ed25519 in the NATS nkeys format.

A seed (``SU…``) signs; a public user key (``U…``) verifies. Signatures are base64url over the
decision's canonical JSON (every field but the signature), so a release can be verified offline
by anyone holding the approvers' public keys.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

from workflow.errors import ConfigError
from workflow.messages import ApprovalDecision, ApprovalRecord, signed_text


class ApproverKey:
    """A signing key loaded from an nkeys user seed."""

    def __init__(self, seed: bytes):
        try:
            self._pair = nkeys.from_seed(bytearray(seed.strip()))
            self.public_key: str = self._pair.public_key.decode()
        except (nkeys.NkeysError, binascii.Error, ValueError) as exc:
            raise ConfigError("not a valid nkeys seed (expected a line starting with SU)") from exc
        if not self.public_key.startswith("U"):
            raise ConfigError("the seed is not a user seed (SU…); approver keys are user nkeys")

    @classmethod
    def generate(cls) -> ApproverKey:
        return cls(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))

    @classmethod
    def from_file(cls, path: Path) -> ApproverKey:
        try:
            return cls(path.read_bytes())
        except OSError as exc:
            raise ConfigError(
                f"cannot read the key file: {exc.strerror}", source=str(path)
            ) from exc
        except ConfigError as exc:
            raise ConfigError(str(exc), source=str(path)) from exc

    @property
    def seed(self) -> bytes:
        return bytes(self._pair.seed)

    def write(self, path: Path) -> None:
        """Write the seed to ``path`` with mode 0600, refusing to overwrite a key."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(self.seed + b"\n")

    def sign(self, data: bytes) -> str:
        return base64.urlsafe_b64encode(self._pair.sign(data)).decode()

    def sign_decision(self, decision: ApprovalDecision) -> ApprovalDecision:
        unsigned = decision.model_copy(update={"key": self.public_key, "signature": None})
        return unsigned.model_copy(update={"signature": self.sign(unsigned.signing_payload())})


def decode_user_key(public_key: str) -> bytes | None:
    """The Ed25519 public key inside a public user nkey (``U…``, 56 characters, with its
    checksum), or None when the text is not one."""
    if len(public_key) != 56 or not public_key.startswith("U"):
        return None
    try:
        raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35 or raw[0] != nkeys.PREFIX_BYTE_USER:
        return None
    body, crc = raw[:-2], raw[-2:]
    if nkeys.crc16(bytearray(body)) != int.from_bytes(crc, "little"):
        return None
    return bytes(body[1:])


@functools.lru_cache(maxsize=1024)  # the same few approvers sign every decision
def _verify_key(public_key: str) -> nacl.signing.VerifyKey | None:
    key = decode_user_key(public_key)
    return nacl.signing.VerifyKey(key) if key is not None else None


def verify(public_key: str, data: bytes, signature: str) -> bool:
    """True when ``signature`` is ``public_key``'s Ed25519 signature over ``data``."""
    key = _verify_key(public_key)
    if key is None:
        return False
    try:
        key.verify(data, base64.urlsafe_b64decode(signature.encode()))
    except (nacl.exceptions.BadSignatureError, binascii.Error, ValueError):
        return False
    return True


def verify_raw(raw: dict[str, Any]) -> bool:
    """Verify a decision as received: the signature over the canonical JSON of the other fields."""
    key, signature = raw.get("key"), raw.get("signature")
    if not isinstance(key, str) or not isinstance(signature, str):
        return False
    if raw.get("passkey") is not None:
        return False  # one signature per decision: an nkey's or a passkey's, not both
    return verify(key, signed_text(raw).encode(), signature)


def verify_record(record: ApprovalRecord) -> bool:
    """Verify an approval carried by a release, offline: the nkey signature, or the passkey
    assertion, over exactly the canonical decision in `record.signed`."""
    if record.passkey is not None:
        if record.signature:
            return False  # one signature per decision
        # Imported here: agents and hooks import this module and never see a passkey.
        from workflow.passkeys import verify_proof

        return verify_proof(record)
    if not record.key or not record.signature or not record.signed:
        return False
    return verify(record.key, record.signed.encode(), record.signature)
