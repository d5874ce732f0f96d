"""Approver keys and decision signatures: Ed25519 in the NATS nkeys format.

A seed (``SU…``) signs; a public user key (``U…``) verifies. Signatures are base64url over the
decision's RFC 8785 form (every field but the signature; `workflow.canonical` holds the scheme
and the cut-over from the legacy form), so a release can be verified offline by anyone holding
the approvers' public keys, and a signer in any language can produce one.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

from workflow.canonical import SIGNATURE_SCHEME, is_signed_form, scheme_problem
from workflow.errors import ConfigError
from workflow.eventsig import SIGNATURE_HEADER as SIGNATURE_HEADER
from workflow.eventsig import SIGNER_HEADER as SIGNER_HEADER
from workflow.eventsig import decode_public
from workflow.eventsig import decode_server_key as decode_server_key
from workflow.eventsig import event_signing_bytes as event_signing_bytes
from workflow.eventsig import is_service_key as is_service_key
from workflow.eventsig import verify_event as verify_event
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
        """The decision with this key, signed over its RFC 8785 form."""
        unsigned = decision.model_copy(
            update={
                "key": self.public_key,
                "signature": None,
                "signature_scheme": SIGNATURE_SCHEME,
            }
        )
        return unsigned.model_copy(update={"signature": self.sign(unsigned.signing_payload())})


def decode_user_key(public_key: str) -> bytes | None:
    """The Ed25519 public key inside a public user nkey (``U…``, 56 characters, with its
    checksum), or None when the text is not one."""
    return decode_public(public_key, "U", nkeys.PREFIX_BYTE_USER)


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
        # base64url with or without its padding: libraries in other languages often drop it.
        key.verify(data, base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    except (nacl.exceptions.BadSignatureError, binascii.Error, ValueError):
        return False
    return True


def verify_raw(raw: dict[str, Any], *, version: str | None = None, text: str | None = None) -> bool:
    """Verify a new decision as received: the signature over the canonical form of the other
    fields, by its `signature_scheme`. A legacy signature is accepted only while
    `workflow.canonical.legacy_accepted` (`version` defaults to this Headgate's). `text`: that
    canonical form, when the caller has it already (`signed_text(raw)`)."""
    key, signature = raw.get("key"), raw.get("signature")
    if not isinstance(key, str) or not isinstance(signature, str):
        return False
    if raw.get("passkey") is not None:
        return False  # one signature per decision: an nkey's or a passkey's, not both
    if (scheme_problem(raw) if version is None else scheme_problem(raw, version)) is not None:
        return False
    if text is None:
        try:
            text = signed_text(raw)
        except ValueError:  # no RFC 8785 form (a number out of range): nothing was signed over it
            return False
    return verify(key, text.encode(), signature)


def verify_record(record: ApprovalRecord) -> bool:
    """Verify an approval carried by a release, offline: the nkey signature, or the passkey
    assertion, over exactly the canonical decision in `record.signed`.

    Either canonical form verifies (RFC 8785, or the legacy form of a record accepted by
    Headgate 0.1.x): a record is history, the cut-over applies to new decisions. `signed` must
    be exactly the canonical form its `signature_scheme` names, so the request id and digest
    read out of it are the ones signed."""
    if not record.signed or not is_signed_form(record.signed):
        return False
    if record.passkey is not None:
        if record.signature:
            return False  # one signature per decision
        # Imported here: agents and hooks import this module and never see a passkey.
        from workflow.passkeys import verify_proof

        return verify_proof(record)
    if not record.key or not record.signature or not record.signed:
        return False
    return verify(record.key, record.signed.encode(), record.signature)


# --------------------------------------------------------------------------- the service's key


class ServiceKey:
    """The service's own signing key: an nkeys *server* seed (``SN…``, public ``N…``), so it
    can never be mistaken for (or registered as) an approver's user key."""

    def __init__(self, seed: bytes):
        try:
            self._pair = nkeys.from_seed(bytearray(seed.strip()))
            self.public_key: str = self._pair.public_key.decode()
        except (nkeys.NkeysError, binascii.Error, ValueError) as exc:
            raise ConfigError("not a valid nkeys seed (expected a line starting with SN)") from exc
        if not self.public_key.startswith("N"):
            raise ConfigError("the service key must be a server seed (SN…), not a user seed")
        self._id_key = hashlib.sha256(b"headgate-msg-id\n" + self.seed).digest()

    @classmethod
    def generate(cls) -> ServiceKey:
        return cls(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_SERVER))

    @classmethod
    def from_file(cls, path: Path) -> ServiceKey:
        try:
            return cls(path.read_bytes())
        except OSError as exc:
            raise ConfigError(
                f"cannot read the service key: {exc.strerror}", source=str(path)
            ) from exc
        except ConfigError as exc:
            raise ConfigError(str(exc), source=str(path)) from exc

    @property
    def seed(self) -> bytes:
        return bytes(self._pair.seed)

    def message_id(self, msg_id: str) -> str:
        """The `Nats-Msg-Id` an event is published under: its id and a tag only this key can
        make. Event ids derive from ids an agent chooses (`inbox:<request id>`,
        `released:<proposal id>`); without the tag anyone could publish first under the same id
        and JetStream would drop the service's event as a duplicate. The tag is deterministic,
        so a re-sent event is still deduplicated (by every replica sharing the key)."""
        tag = hmac.new(self._id_key, msg_id.encode(), hashlib.sha256).hexdigest()[:20]
        return f"{msg_id}~{tag}"

    def headers(self, subject: str, payload: bytes) -> dict[str, str]:
        """The headers that make a message verifiable as this service's."""
        signature = self._pair.sign(event_signing_bytes(subject, payload))
        return {
            SIGNATURE_HEADER: base64.urlsafe_b64encode(signature).decode(),
            SIGNER_HEADER: self.public_key,
        }
