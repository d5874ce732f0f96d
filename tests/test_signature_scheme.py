"""Decisions are signed over RFC 8785 (JCS); the legacy canonical JSON is accepted for one release.

The canonical bytes below are written by hand from RFC 8785 (keys by UTF-16 code units,
ECMAScript numbers, minimal string escapes) and signed with PyNaCl directly: an independent
signer, as one in another language would be. Pure: no I/O.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from typing import Any

import nacl.signing
import nkeys
import pytest

from workflow.approvals import DecisionCheck, HeldRequest, Refusal, apply_decision
from workflow.canonical import (
    LEGACY_REFUSED_FROM,
    is_signed_form,
    jcs,
    legacy_accepted,
    legacy_json,
    scheme_problem,
)
from workflow.messages import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalRequirement,
    DecisionVerdict,
    WebInvite,
    signed_text,
)
from workflow.signing import ApproverKey, verify_raw, verify_record

# --------------------------------------------------------------------------- the canonical form

VALUE: dict[str, Any] = {
    "zeta": [1.0, 2, -0.0, 1e-7, 1e21, 0.5, 123456789012, -7],
    "a": {"b": 'é\n\u2028\x1f"\\', "A": None, "\U0001f600": True, "\ufb01": False, "": []},
    "1": "x",
}
# Keys by UTF-16 code units: U+1F600 is the surrogate pair D83D DE00, so it sorts before U+FB01
# (code point order would put it after); numbers as ECMAScript prints them.
HAND_JCS = (
    '{"1":"x","a":{"":[],"A":null,"b":"é\\n\u2028\\u001f\\"\\\\","\U0001f600":true,'
    '"\ufb01":false},"zeta":[1,2,0,1e-7,1e+21,0.5,123456789012,-7]}'
)


def test_the_canonical_form_is_rfc8785_byte_for_byte() -> None:
    assert jcs(VALUE) == HAND_JCS
    assert is_signed_form(jcs({**VALUE, "signature_scheme": "rfc8785"}))


def test_the_legacy_form_is_not_rfc8785_for_floats_and_astral_keys() -> None:
    legacy = legacy_json(VALUE)
    assert legacy != HAND_JCS
    assert "1.0" in legacy
    assert "1e-07" in legacy
    assert legacy.index("\ufb01") < legacy.index("\U0001f600")


def test_a_value_with_no_rfc8785_form_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="RFC 8785"):
        jcs({"n": 2**60})


# --------------------------------------------------------------------------- an independent signer

SIGNER = nacl.signing.SigningKey(os.urandom(32))
SIGNER_KEY = nkeys.from_seed(
    nkeys.encode_seed(bytes(SIGNER), nkeys.PREFIX_BYTE_USER)
).public_key.decode()
DIGEST = "ab" * 32

# The decision's canonical bytes, written out by hand: members in code-unit order.
HAND_DECISION = (
    '{"approver":"zoë 𝄞","issued_at":"2026-12-01T03:30:00Z",'
    f'"key":"{SIGNER_KEY}","nonce":"n0nce-0001",'
    f'"proposal_digest":"{DIGEST}","reason":"ok — \\"quoted\\"\\t✓ \U0001f600",'
    '"request_id":"req-1","signature_scheme":"rfc8785","verdict":"approve"}'
)


def foreign_signature(text: str, *, padded: bool = False) -> str:
    """base64url of the Ed25519 signature, as another language's library writes it."""
    sig = base64.urlsafe_b64encode(SIGNER.sign(text.encode()).signature).decode()
    return sig if padded else sig.rstrip("=")


def as_sent(fields: dict[str, Any]) -> dict[str, Any]:
    """What the service receives from the foreign signer: another member order, ASCII escapes,
    indentation — none of which is part of what was signed."""
    wire = json.dumps(dict(reversed(list(fields.items()))), indent=2, ensure_ascii=True)
    received: dict[str, Any] = json.loads(wire)
    return received


def test_a_decision_signed_over_hand_written_rfc8785_bytes_verifies() -> None:
    fields = json.loads(HAND_DECISION)
    for padded in (False, True):
        raw = as_sent({**fields, "signature": foreign_signature(HAND_DECISION, padded=padded)})
        assert signed_text(raw) == HAND_DECISION
        assert verify_raw(raw)
        ApprovalDecision.model_validate(raw)  # and it is a valid decision on the wire


def test_the_sdk_signs_the_same_bytes_an_independent_signer_does() -> None:
    fields = json.loads(HAND_DECISION)
    key = ApproverKey(nkeys.encode_seed(bytes(SIGNER), nkeys.PREFIX_BYTE_USER))
    unsigned = ApprovalDecision.model_validate({**fields, "signature_scheme": None})
    signed = key.sign_decision(unsigned)
    assert signed.signature_scheme == "rfc8785"
    assert signed.signing_payload() == HAND_DECISION.encode()
    assert verify_raw(json.loads(signed.model_dump_json()))


def test_an_edited_field_or_a_changed_scheme_fails_verification() -> None:
    raw = {**json.loads(HAND_DECISION), "signature": foreign_signature(HAND_DECISION)}
    assert not verify_raw({**raw, "reason": "ok"})
    assert not verify_raw({**raw, "signature_scheme": None})  # the scheme is signed too
    assert not verify_raw({**raw, "signature_scheme": "jcs-2"})


def test_a_passkey_invitation_with_a_number_is_signed_over_rfc8785() -> None:
    hand = (
        '{"approver":"bob","issued_at":"2026-12-01T03:30:00Z",'
        f'"key":"{SIGNER_KEY}","nonce":"invite-0001","signature_scheme":"rfc8785",'
        '"ttl_seconds":1800}'
    )
    raw = as_sent({**json.loads(hand), "signature": foreign_signature(hand)})
    invite = WebInvite.model_validate(raw)
    assert invite.signing_payload() == hand.encode()
    assert verify_raw(raw)


# --------------------------------------------------------------------------- the cut-over


def legacy_decision() -> dict[str, Any]:
    """A decision as Headgate 0.1.0 signed it: no scheme, Python's canonical JSON."""
    fields = {
        "approver": "zoë", "issued_at": "2026-12-01T03:30:00Z", "key": SIGNER_KEY,
        "nonce": "legacy-0001", "proposal_digest": DIGEST, "reason": "fine", "request_id": "req-1",
        "verdict": "approve",
    }  # fmt: skip
    return {**fields, "signature": foreign_signature(legacy_json(fields), padded=True)}


def test_a_legacy_signature_is_accepted_by_this_release_and_refused_after_the_cut_over() -> None:
    raw = legacy_decision()
    assert legacy_accepted("0.1.0")
    assert legacy_accepted("0.1.7")
    assert verify_raw(raw, version="0.1.0")
    cut = ".".join(map(str, LEGACY_REFUSED_FROM)) + ".0"
    assert not legacy_accepted(cut)
    assert not verify_raw(raw, version=cut)
    problem = scheme_problem(raw, cut)
    assert problem is not None
    assert "rfc8785" in problem
    assert scheme_problem(raw, "0.1.0") is None
    assert scheme_problem({**raw, "signature_scheme": "rfc8785"}, cut) is None


def test_a_refused_legacy_decision_says_why() -> None:
    raw = legacy_decision()
    decision = ApprovalDecision.model_validate(raw)
    cut = ".".join(map(str, LEGACY_REFUSED_FROM)) + ".0"
    check = DecisionCheck(
        signature_valid=verify_raw(raw, version=cut), approver=None, nonce_seen=False,
        signed_text=signed_text(raw), problem=scheme_problem(raw, cut),
    )  # fmt: skip
    request = HeldRequest(
        request_id="req-1", proposal_id="p1", agent="a", workspace="default",
        proposal_digest=DIGEST, requirement=ApprovalRequirement(),
        expires_at=datetime(2026, 12, 1, 4, 30, tzinfo=UTC),
    )  # fmt: skip
    step = apply_decision(request, decision, check, now=datetime(2026, 12, 1, 3, 30, tzinfo=UTC))
    assert not step.accepted
    assert step.refusal == Refusal.BAD_SIGNATURE
    assert "legacy canonical JSON" in step.message


def record_of(raw: dict[str, Any]) -> ApprovalRecord:
    return ApprovalRecord(
        approver=raw["approver"], key=raw["key"], verdict=DecisionVerdict(raw["verdict"]),
        reason=raw["reason"], nonce=raw["nonce"], issued_at=raw["issued_at"],
        signed=signed_text(raw), signature=raw["signature"],
    )  # fmt: skip


def test_verify_record_checks_both_forms_offline() -> None:
    new = {**json.loads(HAND_DECISION), "signature": foreign_signature(HAND_DECISION)}
    for raw in (new, legacy_decision()):
        record = record_of(raw)
        assert verify_record(record)
        assert verify_record(ApprovalRecord.model_validate_json(record.model_dump_json()))
        edited = record.signed.replace(DIGEST, "cd" * 32)
        assert not verify_record(record.model_copy(update={"signed": edited}))


def test_a_record_whose_signed_text_is_not_canonical_is_refused() -> None:
    """The same members, signed, but not in canonical form (or with a member twice): a reader
    could take other fields out of it than the signer meant."""
    fields = json.loads(HAND_DECISION)
    for text in (
        json.dumps(fields, ensure_ascii=False),  # spaces
        HAND_DECISION[:-1] + ',"request_id":"req-2"}',  # a duplicate member
    ):
        record = record_of({**fields, "signature": foreign_signature(text)})
        assert not verify_record(record.model_copy(update={"signed": text}))


def test_verifying_over_a_canonical_form_given_is_verifying_over_the_decision() -> None:
    key = ApproverKey.generate()
    decision = key.sign_decision(
        ApprovalDecision(
            request_id="r-1", proposal_digest="0" * 64, verdict=DecisionVerdict.APPROVE,
            approver="alice", nonce="nonce-0001", issued_at=datetime.now(UTC),
        )
    )  # fmt: skip
    raw = json.loads(decision.model_dump_json())
    text = signed_text(raw)
    assert verify_raw(raw, text=text)
    assert verify_raw(raw)
    tampered = {**raw, "verdict": "reject"}
    assert not verify_raw(tampered, text=signed_text(tampered))
    assert not verify_raw(tampered)
