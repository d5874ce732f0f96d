"""Passkey-signed decisions, verified directly (no I/O): registration, the decision as the
WebAuthn challenge, the refusals, and offline verification of the record a release carries."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.authenticator import SoftAuthenticator
from workflow.messages import ApprovalRecord, PasskeyAssertion, signed_text
from workflow.passkeys import (
    Passkey,
    decision_challenge,
    from_b64url,
    proof,
    verify_decision,
    verify_registration,
    verify_signin,
)
from workflow.signing import ApproverKey, verify_record

ORIGIN = "http://localhost:8080"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def registered(auth: SoftAuthenticator, approver: str = "alice") -> Passkey:
    challenge = b"registration-challenge-0123456789"
    new = verify_registration(
        auth.register(challenge), challenge=challenge, rp_id=auth.rp_id, origins=[ORIGIN]
    )
    return Passkey(new.credential_id, approver, new.public_key, auth.rp_id, new.sign_count)


def decision(**changes: Any) -> dict[str, Any]:
    """A decision as a browser builds it: plain JSON values, its own timestamp format."""
    raw: dict[str, Any] = {
        "request_id": "rq_1",
        "proposal_digest": "d" * 64,
        "verdict": "approve",
        "approver": "alice",
        "key": None,
        "reason": 'looks right — ✓ "quoted"\nsecond line',
        "nonce": uuid.uuid4().hex,
        "issued_at": "2026-11-30T12:00:00.123Z",
    }
    raw.update(changes)
    return raw


def signed_by(auth: SoftAuthenticator, raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "passkey": auth.sign(decision_challenge(raw)).model_dump(mode="json")}


def record_of(raw: dict[str, Any], passkey: Passkey) -> ApprovalRecord:
    assertion = PasskeyAssertion.model_validate(raw["passkey"])
    return ApprovalRecord(
        approver=passkey.approver,
        reason=raw["reason"],
        nonce=raw["nonce"],
        issued_at=NOW,
        signed=signed_text(raw),
        passkey=proof(assertion, passkey),
    )


def test_the_challenge_is_the_canonical_decision_without_its_signatures() -> None:
    raw = decision()
    challenge = decision_challenge({**raw, "signature": "x", "passkey": {"a": 1}})
    assert json.loads(challenge) == raw
    assert challenge == signed_text(raw).encode()


def test_a_registered_passkey_signs_a_decision_that_verifies() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    assert passkey.credential_id == auth.credential_id
    check = verify_decision(signed_by(auth, decision()), passkey, [ORIGIN])
    assert check.valid, check.message
    assert check.sign_count == auth.count


def test_an_assertion_over_another_decision_does_not_verify() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    approved = signed_by(auth, decision())
    for field, value in [("verdict", "reject"), ("request_id", "rq_2"), ("reason", ""),
                         ("proposal_digest", "e" * 64), ("approver", "bob")]:  # fmt: skip
        moved = {**approved, field: value}
        check = verify_decision(moved, passkey, [ORIGIN])
        assert not check.valid, field
        assert "challenge" in check.message


def test_a_counter_that_does_not_advance_is_a_replay() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    raw = signed_by(auth, decision())
    first = verify_decision(raw, passkey, [ORIGIN])
    assert first.valid
    seen = Passkey(passkey.credential_id, "alice", passkey.public_key, "localhost", auth.count)
    again = verify_decision(raw, seen, [ORIGIN])
    assert not again.valid
    assert again.replay


def test_an_authenticator_without_a_counter_is_accepted() -> None:
    auth = SoftAuthenticator(counting=False)
    passkey = registered(auth)
    assert verify_decision(signed_by(auth, decision()), passkey, [ORIGIN]).valid
    assert verify_decision(signed_by(auth, decision()), passkey, [ORIGIN]).valid


def test_a_decision_without_user_verification_is_refused() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    auth.user_verified = False
    check = verify_decision(signed_by(auth, decision()), passkey, [ORIGIN])
    assert not check.valid
    assert "verif" in check.message


def test_an_assertion_from_another_origin_or_credential_is_refused() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    raw = decision()
    phished = {**raw, "passkey": auth.sign(decision_challenge(raw), origin="http://evil.test")}
    phished["passkey"] = phished["passkey"].model_dump(mode="json")
    assert not verify_decision(phished, passkey, [ORIGIN]).valid
    other = SoftAuthenticator()
    registered(other)
    forged = signed_by(other, raw)
    assert not verify_decision(forged, passkey, [ORIGIN]).valid
    # The other credential's assertion, relabelled with alice's credential id: the key differs.
    relabelled = {**forged, "passkey": {**forged["passkey"], "credential_id": auth.credential_id}}
    assert not verify_decision(relabelled, passkey, [ORIGIN]).valid


def test_a_decision_without_an_assertion_is_refused() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    assert not verify_decision(decision(), passkey, [ORIGIN]).valid
    malformed = {**decision(), "passkey": {"credential_id": 3}}
    assert not verify_decision(malformed, passkey, [ORIGIN]).valid


def test_the_record_of_a_passkey_decision_verifies_offline() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    raw = signed_by(auth, decision())
    record = record_of(raw, passkey)
    assert verify_record(record)
    # Round trip through JSON, as a release carries it.
    assert verify_record(ApprovalRecord.model_validate_json(record.model_dump_json()))


def test_an_edited_passkey_record_does_not_verify() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    record = record_of(signed_by(auth, decision()), passkey)
    assert record.passkey is not None
    edited = json.loads(record.signed) | {"verdict": "reject"}
    assert not verify_record(record.model_copy(update={"signed": json.dumps(edited)}))
    other = SoftAuthenticator()
    swapped = record.passkey.model_copy(update={"public_key": registered(other).public_key})
    assert not verify_record(record.model_copy(update={"passkey": swapped}))
    moved = record.passkey.model_copy(update={"rp_id": "example.com"})
    assert not verify_record(record.model_copy(update={"passkey": moved}))
    # A record carrying both kinds of signature is refused rather than half-checked.
    assert not verify_record(record.model_copy(update={"signature": "x", "key": "U"}))


def test_a_passkey_registered_for_another_relying_party_is_refused() -> None:
    auth = SoftAuthenticator(rp_id="inbox.example.com")
    challenge = b"registration-challenge-0123456789"
    with pytest.raises(ValueError, match="does not verify"):
        verify_registration(
            auth.register(challenge), challenge=challenge, rp_id="localhost", origins=[ORIGIN]
        )


def test_sign_in_verifies_a_random_challenge() -> None:
    auth = SoftAuthenticator()
    passkey = registered(auth)
    challenge = b"sign-in-challenge-0123456789abcdef"
    assert verify_signin(
        auth.assertion_json(challenge), challenge=challenge, passkey=passkey, origins=[ORIGIN]
    ).valid
    assert not verify_signin(
        auth.assertion_json(challenge), challenge=b"x" * 32, passkey=passkey, origins=[ORIGIN]
    ).valid


def test_an_nkeys_decision_carrying_a_passkey_field_is_not_an_nkeys_signature() -> None:
    from workflow.messages import ApprovalDecision, DecisionVerdict
    from workflow.signing import verify_raw

    key = ApproverKey.generate()
    d = key.sign_decision(
        ApprovalDecision(
            request_id="rq_1", proposal_digest="d" * 64, verdict=DecisionVerdict.APPROVE,
            approver="alice", nonce=uuid.uuid4().hex, issued_at=NOW,
        )
    )  # fmt: skip
    raw = json.loads(d.model_dump_json())
    assert verify_raw(raw)
    auth = SoftAuthenticator()
    raw["passkey"] = auth.sign(decision_challenge(raw)).model_dump(mode="json")
    assert not verify_raw(raw)


@settings(max_examples=40, deadline=None)
@given(
    field=st.sampled_from(
        ["request_id", "proposal_digest", "verdict", "approver", "reason", "nonce", "issued_at"]
    ),
    value=st.text(min_size=1, max_size=40),
)
def test_changing_any_signed_field_breaks_the_passkey_signature(field: str, value: str) -> None:
    auth = SoftAuthenticator(counting=False)
    passkey = Passkey(auth.credential_id, "alice", _public_key(auth), auth.rp_id)
    raw = signed_by(auth, decision())
    if raw[field] == value:
        return
    assert not verify_decision({**raw, field: value}, passkey, [ORIGIN]).valid


def _public_key(auth: SoftAuthenticator) -> str:
    from workflow.passkeys import b64url

    return b64url(auth.cose_public_key())


def test_base64url_decoding_accepts_browser_encoding() -> None:
    assert from_b64url("AQID") == b"\x01\x02\x03"
    assert from_b64url("AQ") == b"\x01"
