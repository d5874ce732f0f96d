"""Every message on the wire, as pydantic models: the source of `schemas/`.

Models we *receive* forbid unknown fields, so a typo in a field name is an error with a clear
message instead of a silently ignored setting. Models we *emit* are strict too, which keeps the
generated schemas honest.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)

from workflow.canonical import signed_form
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.outcomes import BlockedOutcome

# A NATS subject token: no dots, wildcards or whitespace, so it can be embedded in a subject.
Token = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
Identifier = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@-]+$")]


#: Every approval request id starts with this (`rq_` and 24 hex digits, derived from the
#: proposal id), and no proposal id may: an id names one kind of thing, so a lookup by id
#: can never take an attacker's proposal for a victim's request.
REQUEST_ID_PREFIX = "rq_"


def _not_a_request_id(value: str) -> str:
    if value.startswith(REQUEST_ID_PREFIX):
        raise ValueError(f"a proposal id may not start with {REQUEST_ID_PREFIX!r} (request ids do)")
    return value


ProposalId = Annotated[
    Identifier,
    AfterValidator(_not_a_request_id),
    Field(json_schema_extra={"not": {"pattern": f"^{REQUEST_ID_PREFIX}"}}),
]

#: Bounds of received free text, in characters: every string the service receives is bounded,
#: so what it accepts always fits its columns and the records that quote it.
SHORT = 200
REASON = 2000
#: A sha256 hex digest.
Digest = Annotated[str, Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]{64}$")]
#: A public nkey (56 characters) or a passkey reference, as a decision names its signer.
PublicKey = Annotated[str, Field(min_length=1, max_length=64)]
#: An Ed25519 signature, base64 (88 characters).
Signature = Annotated[str, Field(min_length=1, max_length=200)]


class Wire(BaseModel):
    # `cache_strings="keys"`: pydantic-core keeps the strings it parses in a process-wide
    # cache of 16,384 entries; with the default ("all") every value goes in too, and the wire's
    # values are mostly unique (proposal ids, paths, nonces), so the cache filled with strings
    # never met again — about 1.2 MB held from the first minutes of a soak on (docs/bench.md,
    # tenth pass). Keys repeat; values are parsed as fresh strings (no measurable cost).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, cache_strings="keys")


# --------------------------------------------------------------------------- proposals


class ToolAnnotations(BaseModel):
    """MCP tool annotations. Unknown keys are kept (the MCP spec grows) and hashed."""

    model_config = ConfigDict(extra="allow", frozen=True)

    title: Annotated[str, Field(max_length=SHORT)] | None = None
    readOnlyHint: bool | None = None
    destructiveHint: bool | None = None
    idempotentHint: bool | None = None
    openWorldHint: bool | None = None


class ToolDefinition(Wire):
    """What the tool says about itself: suggestions from its author, never trusted to lower risk."""

    description: Annotated[str, Field(max_length=65_536)] = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    annotations: ToolAnnotations | None = None
    requires_approval: bool | None = None
    server: Annotated[str, Field(max_length=SHORT)] | None = Field(
        default=None, description="Kind of server offering the tool (e.g. 'postgres-mcp')."
    )


class ProposalContext(Wire):
    cwd: Annotated[str, Field(max_length=4096)] | None = None
    shell: Annotated[str, Field(max_length=SHORT)] | None = None
    client: str | None = Field(
        default=None,
        max_length=64,
        description="The agent client that made the call (claude-code, codex, gemini, cursor).",
    )
    session_id: str | None = Field(
        default=None,
        max_length=200,
        description="The client's session, so approvers can group the calls of one session.",
    )


class Proposal(Wire):
    """One tool call an agent wants to make. `id` is the idempotency key."""

    id: ProposalId
    agent: Token
    workspace: Token = "default"
    source: Token | None = Field(default=None, description="Data source or connection name.")
    tool: Annotated[str, Field(min_length=1, max_length=200)]
    arguments: dict[str, Any] = Field(default_factory=dict)
    tool_definition: ToolDefinition | None = None
    capability: Annotated[str, Field(max_length=64)] | None = Field(
        default=None,
        description="Declared verb (read, list, write, persist, exec, egress_fetch, "
        "egress_provider, authz). Any other value fails closed.",
    )
    context: ProposalContext | None = None
    intent: Annotated[str, Field(max_length=4000)] | None = Field(
        default=None, description="Shown to approvers, never trusted."
    )
    created_at: AwareDatetime | None = None

    def digest(self) -> str:
        """sha256 of the canonical JSON of the proposal; decisions are bound to it."""
        return sha256_hex(canonical_json(self.model_dump(mode="json", exclude_none=True)))


# --------------------------------------------------------------------------- classification


class Hints(Wire):
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None


class Reason(Wire):
    """One rule that fired, in words an approver understands."""

    rule: str = Field(description="Stable rule id, e.g. 'shell.rm_recursive'.")
    message: str
    risk_class: RiskClass | None = None
    severity: Severity | None = None


class Classification(Wire):
    risk_class: RiskClass
    severity: Severity
    categories: list[Category] = Field(default_factory=list)
    hints: Hints = Field(default_factory=Hints)
    fail_closed: bool = False
    tool_known: bool = True
    definition_hash: str | None = None
    reasons: list[Reason] = Field(default_factory=list)


# --------------------------------------------------------------------------- verdicts


class Decision(StrEnum):
    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"

    @property
    def rank(self) -> int:
        return _DECISION_RANK[self]


_DECISION_RANK = {Decision.ALLOW: 0, Decision.REQUIRE_APPROVAL: 1, Decision.DENY: 2}


class ApprovalRequirement(Wire):
    quorum: Annotated[int, Field(ge=1, le=20)] = 1
    roles: list[str] = Field(
        default_factory=list, description="An approver needs one of these roles; empty = any."
    )
    four_eyes: bool = Field(default=False, description="At least two distinct approvers.")
    ttl_seconds: Annotated[int, Field(ge=1)] = 3600

    @property
    def approvals_needed(self) -> int:
        return max(self.quorum, 2 if self.four_eyes else 1)


class TrailStep(Wire):
    step: str = Field(description="Which evaluation step applied, e.g. 'risk_class'.")
    decision: Decision
    message: str


class Verdict(Wire):
    decision: Decision
    reason: str
    requirement: ApprovalRequirement | None = None
    trail: list[TrailStep] = Field(default_factory=list)
    policy_revision: str = ""


# --------------------------------------------------------------------------- approvals


class DecisionVerdict(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


#: The canonical form a signed message was signed over (see `workflow.canonical`).
SignatureScheme = Literal["rfc8785"]
SCHEME_FIELD: Any = Field(
    default=None,
    description="'rfc8785': signed over the RFC 8785 (JCS) form of every field but the "
    "signatures. Absent: the legacy canonical JSON, accepted by Headgate 0.1.x only.",
)


class PasskeyAssertion(Wire):
    """A passkey's signature over a decision: what `navigator.credentials.get` returned.

    The WebAuthn challenge is the decision itself (the UTF-8 bytes of its RFC 8785 form, see
    `ApprovalDecision.signing_payload`), so the assertion signs the decision as an nkeys
    signature does. Every field is base64url without padding, as browsers encode them.
    """

    credential_id: Annotated[str, Field(min_length=16, max_length=1400)]
    authenticator_data: Annotated[str, Field(min_length=50, max_length=4000)]
    client_data_json: Annotated[str, Field(min_length=20, max_length=200_000)]
    signature: Annotated[str, Field(min_length=16, max_length=2000)]
    user_handle: Annotated[str, Field(max_length=200)] | None = None


class ApprovalDecision(Wire):
    """One approver's answer to one approval request, published on headgate.decisions.<id>.

    Signed either with the approver's nkey (`key` + `signature`: Ed25519 over the RFC 8785 form
    of every other field) or with a registered passkey (`passkey`: a WebAuthn assertion whose
    challenge is the RFC 8785 form of every field but `signature` and `passkey`). Without
    `signature_scheme` the decision was signed over the legacy canonical JSON (see
    `workflow.canonical`), accepted by Headgate 0.1.x only.
    """

    request_id: Token
    proposal_digest: Digest | None = None
    verdict: DecisionVerdict
    approver: Annotated[str, Field(min_length=1, max_length=128)]
    key: PublicKey | None = Field(default=None, description="Approver's public nkey (U...).")
    reason: Annotated[str, Field(max_length=REASON)] = ""
    nonce: Annotated[str, Field(min_length=8, max_length=100)]
    issued_at: AwareDatetime
    signature_scheme: SignatureScheme | None = SCHEME_FIELD
    signature: Signature | None = None
    passkey: PasskeyAssertion | None = Field(
        default=None, description="A WebAuthn assertion over the decision (browser approvals)."
    )
    edited_arguments: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="An approval of the call with these arguments instead (edit before "
        "approve): `proposal_digest` is then the digest of the edited proposal.",
    )

    def signing_payload(self) -> bytes:
        """What the approver signs: the canonical form (by `signature_scheme`) of every field
        but the signatures.

        The service verifies over the canonical form of the JSON *as received* (see
        `workflow.signing.verify_raw`), so signers in other languages need only produce the
        same field values and RFC 8785, not pydantic's exact serialisation.
        """
        return signed_text(self.model_dump(mode="json")).encode()


#: The fields of a decision that carry its signature and so are not part of what is signed.
UNSIGNED_FIELDS = frozenset({"signature", "passkey"})


def signed_text(raw: dict[str, Any]) -> str:
    """What a decision received as `raw` JSON was signed over: the canonical form, by its
    `signature_scheme` (RFC 8785, or the legacy form without one), of every field but its
    signatures. It is also the WebAuthn challenge of a passkey-signed decision."""
    return signed_form({k: v for k, v in raw.items() if k not in UNSIGNED_FIELDS})


class PasskeyProof(Wire):
    """A passkey assertion kept with the approval it signed, verifiable offline: the
    credential's public key (COSE, base64url) and the relying party id it was made for."""

    credential_id: str
    public_key: str
    rp_id: str
    authenticator_data: str
    client_data_json: str
    signature: str


class ApprovalRecord(Wire):
    """A verified decision carried by a release or a history, verifiable offline.

    `signed` is the exact canonical JSON the approver signed; verify `signature` over it with
    `key` (or the `passkey` assertion, whose challenge it is: `signing.verify_record` does
    either), then read request id and proposal digest out of it.
    """

    approver: str
    key: str | None = None
    verdict: DecisionVerdict = DecisionVerdict.APPROVE
    reason: str = ""
    nonce: str
    issued_at: AwareDatetime
    signed: str = ""
    signature: str | None = None
    passkey: PasskeyProof | None = Field(
        default=None, description="Set when the decision was signed with a passkey."
    )


class Cancel(Wire):
    """An agent withdrawing its own pending proposal, on headgate.cancel.<agent>."""

    proposal_id: Identifier
    agent: Token
    reason: Annotated[str, Field(max_length=REASON)] = ""


# --------------------------------------------------------------------------- events


class InboxItem(Wire):
    """A held proposal waiting for approvals, on headgate.inbox.<workspace>."""

    request_id: Token
    proposal_id: Identifier
    proposal: Proposal
    proposal_digest: str
    classification: Classification
    verdict: Verdict
    requirement: ApprovalRequirement
    created_at: AwareDatetime
    expires_at: AwareDatetime


class Held(Wire):
    """Told to the proposing agent when its call is held for approval (headgate.held.<agent>).

    Lets an agent learn its verdict from its own results stream, without access to the inbox.
    """

    proposal_id: Identifier
    request_id: Token
    agent: Token
    workspace: Token
    tool: str
    classification: Classification
    verdict: Verdict
    requirement: ApprovalRequirement
    expires_at: AwareDatetime
    held_at: AwareDatetime


class Released(Wire):
    """The call may run. Fires at most once per proposal."""

    release_id: Identifier
    proposal_id: Identifier
    request_id: Token | None = None
    agent: Token
    workspace: Token
    tool: str
    arguments: dict[str, Any]
    classification: Classification
    verdict: Verdict
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    proposal_digest: str
    released_at: AwareDatetime
    edited_from: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Set when an approver edited the call before approving it: the digest of "
        "the proposal as the agent sent it (`arguments` and `proposal_digest` are the edited "
        "call's).",
    )


class Blocked(Wire):
    """Terminal: the call will never run."""

    proposal_id: Identifier
    agent: Token
    workspace: Token
    tool: str
    outcome: BlockedOutcome
    reason: str
    request_id: Token | None = None
    classification: Classification | None = None
    verdict: Verdict | None = None
    blocked_at: AwareDatetime


class Executed(Wire):
    """An agent reporting what happened when it ran a released call."""

    release_id: Identifier
    proposal_id: Identifier
    agent: Token
    success: bool
    summary: str = Field(default="", max_length=4000)
    finished_at: AwareDatetime


class Escalated(Wire):
    """A step of a request's escalation ladder was taken (headgate.escalated.<workspace>)."""

    request_id: Token
    proposal_id: Identifier
    agent: Token
    workspace: Token
    step: Annotated[int, Field(ge=0)] = Field(description="0-based index in the ladder.")
    action: Literal["remind", "notify", "raise", "expire"]
    message: str
    roles: list[str] = Field(default_factory=list, description="Roles to notify (notify).")
    channels: list[str] = Field(default_factory=list, description="Channels to notify.")
    requirement: ApprovalRequirement | None = Field(
        default=None, description="The raised requirement (raise)."
    )
    at: AwareDatetime


class Notified(Wire):
    """The record of one notification to one channel (headgate.notified.<workspace>)."""

    delivery: str = Field(description="Stable id of the notice: <request id>:<event>[:<step>].")
    channel: str
    kind: str = Field(description="held, an outcome, or escalated.")
    request_id: Token
    proposal_id: Identifier
    workspace: Token
    delivered: bool
    attempts: int
    error: str = ""
    at: AwareDatetime


class DeadLetter(Wire):
    """Input a stage could not process, with the error. Nothing is dropped silently.

    The letter is bounded in size whatever the input was: a long payload is cut (`truncated`)
    and `payload_sha256` and `payload_size` identify the whole of it.
    """

    stage: str
    subject: str
    error: str
    payload: str = Field(
        description="The original payload (UTF-8, or base64 if it was not), cut to its first "
        "32 KiB when longer."
    )
    payload_encoding: Literal["utf-8", "base64"] = "utf-8"
    payload_size: int = Field(default=0, description="Bytes in the original payload.")
    payload_sha256: str = Field(default="", description="sha256 of the whole original payload.")
    truncated: bool = False
    deliveries: int = 1
    received_at: AwareDatetime


# --------------------------------------------------------------------------- request/reply API


class PendingQuery(Wire):
    workspace: Token | None = None
    agent: Token | None = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100


class PendingEntry(Wire):
    request_id: Token
    proposal_id: Identifier
    agent: str
    workspace: str
    tool: str
    arguments: dict[str, Any]
    intent: str | None = Field(
        default=None, description="The agent's own words about the call: shown, never trusted."
    )
    risk_class: RiskClass
    severity: Severity
    reasons: list[str]
    requirement: ApprovalRequirement
    approvals: list[str] = Field(default_factory=list)
    proposal_digest: str
    created_at: AwareDatetime
    expires_at: AwareDatetime


class PendingReply(Wire):
    items: list[PendingEntry]


class GetQuery(Wire):
    id: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="A proposal id or a request id."
    )


class HistoryEvent(Wire):
    at: AwareDatetime
    kind: str
    summary: str
    data: dict[str, Any] = Field(default_factory=dict)


class ProposalHistory(Wire):
    proposal: Proposal
    proposal_digest: str
    status: str = Field(description="pending, released, denied, rejected, expired or cancelled.")
    classification: Classification
    verdict: Verdict
    request_id: str | None = None
    requirement: ApprovalRequirement | None = None
    expires_at: AwareDatetime | None = None
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    events: list[HistoryEvent] = Field(default_factory=list)


class OfferedQuery(Wire):
    """Which of these tools should an agent be offered at all? (headgate.api.offered)"""

    agent: Token
    workspace: Token = "default"
    read_only: bool = Field(default=False, description="Planning mode: offer reads only.")
    tools: dict[str, Any] = Field(
        description='An MCP `tools/list` answer: {"tools": [{name, description, inputSchema, '
        "annotations}]}."
    )


class OfferedTool(Wire):
    name: str
    decision: Decision
    reason: str


class OfferedReply(Wire):
    allowed: list[OfferedTool]
    approvable: list[OfferedTool]
    denied: list[OfferedTool]


class ApiError(Wire):
    error: str


class ServiceKeyQuery(Wire):
    """Ask for the key the service signs its events and answers with (headgate.api.key)."""


class ServiceKeyReply(Wire):
    public_key: str = Field(
        description="The service's public nkey (N…). Every inbox item, result event and API "
        "answer carries its Ed25519 signature over `headgate-event-v1\\n<subject>\\n<payload>` "
        "in the Headgate-Signature header (base64url)."
    )


# --------------------------------------------------------------------------- web inbox API


class WebInvite(Wire):
    """Ask for a one-time link that registers a passkey for `approver` (headgate.api.web.invite).

    Signed like a decision (nkeys, over the RFC 8785 form of every other field) by an approver
    with the `admin` role or by the invited approver's own key: a passkey becomes a way to sign
    as that person, so not anyone who can reach the API may hand one out.
    """

    approver: Token
    ttl_seconds: Annotated[int, Field(ge=60, le=7 * 86400)] = 1800
    nonce: Annotated[str, Field(min_length=8, max_length=100)]
    issued_at: AwareDatetime
    signature_scheme: SignatureScheme | None = SCHEME_FIELD
    key: PublicKey | None = None
    signature: Signature | None = None

    def signing_payload(self) -> bytes:
        """What the inviting approver signs: the canonical form of every other field."""
        return signed_text(self.model_dump(mode="json")).encode()


class WebInviteReply(Wire):
    approver: str
    token: str
    url: str | None = Field(
        default=None, description="The link, when the service serves the inbox."
    )
    expires_at: AwareDatetime


class InvitationQuery(Wire):
    token: Annotated[str, Field(min_length=16, max_length=200)]


class InvitationReply(Wire):
    approver: str
    expires_at: AwareDatetime
    credential_ids: list[str] = Field(
        default_factory=list, description="The approver's passkeys already registered."
    )


class PasskeyRegistration(Wire):
    """Store a verified passkey for the invitation's approver and use up the invitation."""

    token: Annotated[str, Field(min_length=16, max_length=200)]
    credential_id: Annotated[str, Field(min_length=16, max_length=1400)]
    public_key: Annotated[str, Field(min_length=16, max_length=4000)]
    sign_count: Annotated[int, Field(ge=0)] = 0
    rp_id: Annotated[str, Field(min_length=1, max_length=253)]
    label: Annotated[str, Field(max_length=200)] = ""


class PasskeyQuery(Wire):
    credential_id: Annotated[str, Field(min_length=16, max_length=1400)]


class PasskeyInfo(Wire):
    """A registered passkey (public data only) and what its approver may do."""

    approver: str
    credential_id: str
    public_key: str
    rp_id: str
    sign_count: int
    roles: list[str] = Field(default_factory=list)
    workspaces: list[str] = Field(default_factory=list)
    credential_ids: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- helpers


_TOKEN: TypeAdapter[str] = TypeAdapter(Token)
_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


def is_token(value: object) -> TypeGuard[str]:
    """Whether `value` is a valid `Token` (read out of input that failed validation)."""
    return _conforms(_TOKEN, value)


def is_identifier(value: object) -> TypeGuard[str]:
    """Whether `value` is a valid `Identifier` (read out of input that failed validation)."""
    return _conforms(_IDENTIFIER, value)


def _conforms(adapter: TypeAdapter[str], value: object) -> bool:
    try:
        adapter.validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


#: The encoder `json.dumps` would build for `canonical_json`'s arguments on every call, built
#: once (it holds no state between calls): the audit chain hashes several values per proposal.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no insignificant whitespace, UTF-8 kept (what
    `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` gives)."""
    return _CANONICAL.encode(value)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def definition_hash(definition: ToolDefinition) -> str:
    """sha256 over the canonical JSON of description, input schema and annotations: what a
    tool says about itself, the part a pin (`headgate tools pin`) is bound to."""
    body = {
        "description": definition.description,
        "input_schema": definition.input_schema,
        "annotations": (
            definition.annotations.model_dump(mode="json", exclude_none=True)
            if definition.annotations
            else {}
        ),
    }
    return sha256_hex(canonical_json(body))


#: Every model that travels on a subject, by schema file name (see `headgate schemas`).
WIRE_MODELS: dict[str, type[BaseModel]] = {
    "proposal": Proposal,
    "classification": Classification,
    "verdict": Verdict,
    "inbox_item": InboxItem,
    "decision": ApprovalDecision,
    "cancel": Cancel,
    "held": Held,
    "released": Released,
    "blocked": Blocked,
    "executed": Executed,
    "dead_letter": DeadLetter,
    "escalated": Escalated,
    "notified": Notified,
    "api_pending_query": PendingQuery,
    "api_pending_reply": PendingReply,
    "api_get_query": GetQuery,
    "api_get_reply": ProposalHistory,
    "api_offered_query": OfferedQuery,
    "api_offered_reply": OfferedReply,
    "api_error": ApiError,
    "api_key_query": ServiceKeyQuery,
    "api_key_reply": ServiceKeyReply,
    "api_web_invite": WebInvite,
    "api_web_invite_reply": WebInviteReply,
    "api_web_invitation_query": InvitationQuery,
    "api_web_invitation_reply": InvitationReply,
    "api_web_register": PasskeyRegistration,
    "api_web_passkey_query": PasskeyQuery,
    "api_web_passkey_reply": PasskeyInfo,
}
