"""Passkeys (WebAuthn): registering an approver's credential and verifying decisions signed with it.

A decision made in a browser is signed by the approver's passkey, not by the server: the WebAuthn
challenge is the decision itself — the UTF-8 bytes of the RFC 8785 form of every field but its
signatures (request id, proposal digest, verdict, approver, nonce, issued-at, reason), exactly
what an nkeys signature covers. The authenticator signs `authenticatorData || sha256(
clientDataJSON)`, and `clientDataJSON` carries that challenge, so whoever holds the credential's
public key can check, offline, which decision the person approved. The server only ever holds
public keys.

Verification is py_webauthn's; this module decides what is checked: the challenge is the
decision as received, the relying party id the credential was registered for, the origins the
inbox is served from, user verification (a decision is the person's, not just a tap), and the
signature counter (an authenticator that counts must count up, or the assertion is a replay).
Pure: no I/O, no clock. py_webauthn (and the cryptography it loads) is imported when a passkey
is first checked, not by every command that imports the collector.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from workflow.canonical import scheme_problem
from workflow.messages import ApprovalRecord, PasskeyAssertion, PasskeyProof, signed_text


def b64url(data: bytes) -> str:
    """base64url without padding, as WebAuthn encodes binary fields."""
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def from_b64url(text: str) -> bytes:
    """Decode base64url with or without padding; ValueError when it is not base64url."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def decision_challenge(raw: Mapping[str, Any]) -> bytes:
    """The WebAuthn challenge of a decision: the canonical JSON of every field but its
    signatures, as received (a browser produces the same field values, not pydantic's form)."""
    return signed_text(dict(raw)).encode()


@dataclass(frozen=True, slots=True)
class Passkey:
    """A registered credential: whose it is, its public key (COSE) and where it is valid."""

    credential_id: str
    approver: str
    public_key: str
    rp_id: str
    sign_count: int = 0


@dataclass(frozen=True, slots=True)
class PasskeyCheck:
    """What verifying an assertion established. `replay` marks a counter that did not advance."""

    valid: bool
    message: str
    sign_count: int = 0
    replay: bool = False


def _credential_json(assertion: PasskeyAssertion) -> dict[str, Any]:
    response: dict[str, Any] = {
        "authenticatorData": assertion.authenticator_data,
        "clientDataJSON": assertion.client_data_json,
        "signature": assertion.signature,
    }
    if assertion.user_handle:
        response["userHandle"] = assertion.user_handle
    return {
        "id": assertion.credential_id,
        "rawId": assertion.credential_id,
        "type": "public-key",
        "response": response,
    }


def _verify(
    credential: dict[str, Any],
    challenge: bytes,
    passkey: Passkey,
    origins: Sequence[str],
    *,
    sign_count: int,
) -> PasskeyCheck:
    from webauthn import verify_authentication_response
    from webauthn.helpers.exceptions import InvalidAuthenticationResponse

    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=passkey.rp_id,
            expected_origin=list(origins),
            credential_public_key=from_b64url(passkey.public_key),
            credential_current_sign_count=sign_count,
            require_user_verification=True,
        )
    except InvalidAuthenticationResponse as exc:
        text = str(exc)
        if "sign count" in text:
            return PasskeyCheck(
                False,
                f"The passkey's signature counter did not advance ({text}): a replayed assertion.",
                replay=True,
            )
        return PasskeyCheck(False, f"The passkey assertion does not verify: {text}.")
    except (ValueError, KeyError, TypeError) as exc:
        return PasskeyCheck(False, f"The passkey assertion is malformed: {exc}.")
    return PasskeyCheck(True, "verified", sign_count=verified.new_sign_count)


def verify_decision(
    raw: Mapping[str, Any], passkey: Passkey, origins: Sequence[str]
) -> PasskeyCheck:
    """Verify the passkey assertion carried by a decision (as received) against the approver's
    registered credential: the challenge must be this very decision."""
    found = raw.get("passkey")
    try:
        assertion = PasskeyAssertion.model_validate(found)
    except ValueError:
        return PasskeyCheck(False, "The decision carries no valid passkey assertion.")
    if assertion.credential_id != passkey.credential_id:
        return PasskeyCheck(False, "The assertion was made with another credential.")
    problem = scheme_problem(raw)
    if problem is not None:
        return PasskeyCheck(False, problem)
    try:
        challenge = decision_challenge(raw)
    except ValueError as exc:
        return PasskeyCheck(False, f"The decision has no canonical form: {exc}.")
    return _verify(
        _credential_json(assertion),
        challenge,
        passkey,
        origins,
        sign_count=passkey.sign_count,
    )


def proof(assertion: PasskeyAssertion, passkey: Passkey) -> PasskeyProof:
    """What a release carries of a passkey-signed decision, to be verified offline."""
    return PasskeyProof(
        credential_id=passkey.credential_id,
        public_key=passkey.public_key,
        rp_id=passkey.rp_id,
        authenticator_data=assertion.authenticator_data,
        client_data_json=assertion.client_data_json,
        signature=assertion.signature,
    )


def origin_allowed(origin: str, rp_id: str) -> bool:
    """WebAuthn's rule, as browsers apply it: the origin's host is the relying party id or a
    subdomain of it, over HTTPS (plain HTTP only on localhost, a secure context too)."""
    parts = urlsplit(origin)
    host = parts.hostname or ""
    if parts.scheme != "https" and not (parts.scheme == "http" and host == "localhost"):
        return False
    return host == rp_id or host.endswith("." + rp_id)


def assertion_origin(assertion: PasskeyAssertion | PasskeyProof) -> str | None:
    """The origin the browser wrote into the assertion's client data, if it is readable."""
    try:
        client_data = json.loads(from_b64url(assertion.client_data_json))
        return str(client_data["origin"])
    except (ValueError, KeyError, TypeError):
        return None


def verify_decision_at(raw: Mapping[str, Any], passkey: Passkey) -> PasskeyCheck:
    """`verify_decision` for a collector that serves no pages itself: the assertion must come
    from an origin the credential's relying party covers (its registration checked the web
    inbox's own origin)."""
    try:
        assertion = PasskeyAssertion.model_validate(raw.get("passkey"))
    except ValueError:
        return PasskeyCheck(False, "The decision carries no valid passkey assertion.")
    origin = assertion_origin(assertion)
    if origin is None or not origin_allowed(origin, passkey.rp_id):
        return PasskeyCheck(
            False, f"The assertion was made on {origin or 'an unknown origin'}, not for "
            f"{passkey.rp_id}."
        )  # fmt: skip
    return verify_decision(raw, passkey, [origin])


def verify_proof(record: ApprovalRecord) -> bool:
    """Offline: the record's passkey signed exactly `record.signed`, for its relying party."""
    carried = record.passkey
    if carried is None or not record.signed:
        return False
    origin = assertion_origin(carried)
    if origin is None or not origin_allowed(origin, carried.rp_id):
        return False
    passkey = Passkey(carried.credential_id, record.approver, carried.public_key, carried.rp_id)
    credential = _credential_json(
        PasskeyAssertion(
            credential_id=carried.credential_id,
            authenticator_data=carried.authenticator_data,
            client_data_json=carried.client_data_json,
            signature=carried.signature,
        )
    )
    return _verify(credential, record.signed.encode(), passkey, [origin], sign_count=0).valid


# --------------------------------------------------------------------------- ceremonies


@dataclass(frozen=True, slots=True)
class NewPasskey:
    credential_id: str
    public_key: str
    sign_count: int


def user_handle(approver: str) -> bytes:
    """A stable WebAuthn user handle for an approver (no personal data: the name's bytes)."""
    return approver.encode()[:64]


def registration_options(
    *, rp_id: str, rp_name: str, approver: str, challenge: bytes, exclude: Sequence[str] = ()
) -> str:
    """`navigator.credentials.create` options (JSON) for registering `approver`'s passkey."""
    from webauthn import generate_registration_options, options_to_json
    from webauthn.helpers.structs import (
        AuthenticatorSelectionCriteria,
        PublicKeyCredentialDescriptor,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )

    options = generate_registration_options(
        rp_id=rp_id,
        rp_name=rp_name,
        user_name=approver,
        user_id=user_handle(approver),
        user_display_name=approver,
        challenge=challenge,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[PublicKeyCredentialDescriptor(id=from_b64url(cid)) for cid in exclude],
    )
    return options_to_json(options)


def verify_registration(
    credential: Mapping[str, Any], *, challenge: bytes, rp_id: str, origins: Sequence[str]
) -> NewPasskey:
    """Check a `navigator.credentials.create` answer; ValueError with a sentence if it fails."""
    from webauthn import verify_registration_response
    from webauthn.helpers.exceptions import InvalidRegistrationResponse

    try:
        verified = verify_registration_response(
            credential=dict(credential),
            expected_challenge=challenge,
            expected_rp_id=rp_id,
            expected_origin=list(origins),
            require_user_verification=True,
        )
    except InvalidRegistrationResponse as exc:
        raise ValueError(f"the passkey registration does not verify: {exc}") from exc
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the passkey registration is malformed: {exc}") from exc
    return NewPasskey(
        credential_id=b64url(verified.credential_id),
        public_key=b64url(verified.credential_public_key),
        sign_count=verified.sign_count,
    )


def signin_options(*, rp_id: str, challenge: bytes) -> str:
    """`navigator.credentials.get` options (JSON) for signing in with any registered passkey."""
    from webauthn import generate_authentication_options, options_to_json
    from webauthn.helpers.structs import UserVerificationRequirement

    return options_to_json(
        generate_authentication_options(
            rp_id=rp_id,
            challenge=challenge,
            user_verification=UserVerificationRequirement.REQUIRED,
        )
    )


def verify_signin(
    credential: Mapping[str, Any], *, challenge: bytes, passkey: Passkey, origins: Sequence[str]
) -> PasskeyCheck:
    """Check a sign-in assertion (a random challenge, not a decision)."""
    return _verify(dict(credential), challenge, passkey, origins, sign_count=passkey.sign_count)


def credential_id_of(credential: Mapping[str, Any]) -> str | None:
    """The credential id a browser answer names, if it names one."""
    cid = credential.get("id")
    return cid if isinstance(cid, str) and cid else None
