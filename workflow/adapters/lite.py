"""A hook call's I/O without the SDK: the same flow as `gate`, synchronous and light.

`headgate hook` is a process per tool call, and most of the SDK path's cost is importing
asyncio, nats-py and the pydantic wire models. This path does the same exchange with the small
synchronous client of `litenats` and plain JSON:

- the agent's results subjects (`<prefix>.held|released|blocked.<agent>`) are subscribed
  before anything is published (a core subscription, which the embedded server's agent user
  may make; where the server refuses it, an ephemeral JetStream consumer delivering new events
  to the private inbox instead);
- the current generation of the call is found through the agent's status API
  (`generation_search`), the proposal is published into JetStream with `Nats-Msg-Id: <agent>:<id>` —
  the same subject, header and fields as the SDK's `Proposal` — and its first event or its
  history says what the service decided; a held call waits up to `--wait` for its outcome;
- after the call ran, `executed` is reported like `workflow.client.worker.report_execution`.

Every event and API answer acted on must carry the service's signature
(`workflow.eventsig`), with the key pinned in `HEADGATE_SERVICE_KEY` or the data dir's
`service.pub`, else learnt once on `<prefix>.api.key` (trust on first use), as the SDK does.
A message that does not verify is ignored; nothing unverified ever allows a call.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from workflow.adapters.calls import (
    NEUTRAL,
    Answer,
    HookCall,
    OnPending,
    Phase,
    pending_answer,
    proposal_base,
    proposal_id,
)
from workflow.adapters.flow import (
    blocked_answer,
    executed,
    generation_search,
    proposal_context,
    proposal_source,
    released_answer,
    spent,
)
from workflow.adapters.litenats import (
    Connection,
    Msg,
    NatsConnectionLost,
    NatsError,
    NatsPermissionError,
    NatsTimeout,
    NoResponders,
    connect,
    open_connection,
)
from workflow.adapters.options import GateOptions
from workflow.errors import ConnectError, HeadgateError
from workflow.eventsig import (
    SIGNATURE_HEADER,
    SIGNER_HEADER,
    key_from_answer,
    pinned_key,
    verify_event,
)
from workflow.ids import proposal_msg_id, release_id_for, report_msg_id
from workflow.nats_target import Role, resolve_nats
from workflow.outcomes import PENDING, Outcome, is_terminal
from workflow.subjects import Subjects

#: Seconds to wait for the service to say its key (as `workflow.client.trust`).
KEY_TIMEOUT = 5.0
#: Seconds an API question may take (as `workflow.client.transport.ask`).
ASK_TIMEOUT = 5.0
#: Seconds a JetStream publish is retried while the server cannot confirm it.
PUBLISH_TIMEOUT = 15.0
#: Seconds a published proposal may take to be classified before the service is called absent.
CLASSIFY_TIMEOUT = 10.0
#: How often a held call's status is asked while its outcome is awaited.
RECHECK = 10.0
#: Slack between the service's clock (proposal times) and the server's (stream timestamps).
CLOCK_SLACK = timedelta(minutes=5)
#: The blocked outcomes of the wire schema.
BLOCKED = frozenset(o.value for o in Outcome if o.blocked)

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_IDENTIFIER = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")


class ApiRefused(HeadgateError):
    """The service answered a query with an error (an unknown id, an invalid request)."""


def timestamp(at: datetime) -> str:
    """An aware time as the wire models write it (`2026-01-01T00:00:00.123456Z`)."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dumps(value: Mapping[str, Any]) -> bytes:
    """Compact JSON as the wire models write it (UTF-8, no escaping of non-ASCII)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def proposal_body(
    call: HookCall, pid: str, agent: str, workspace: str, created_at: datetime
) -> dict[str, Any]:
    """The proposal the SDK publishes for this call (`workflow.messages.Proposal`, every
    field in its order), checked against the same bounds; ValueError when outside them."""
    context = proposal_context(call)
    body: dict[str, Any] = {
        "id": pid, "agent": agent, "workspace": workspace, "source": proposal_source(call),
        "tool": call.tool, "arguments": dict(call.arguments), "tool_definition": None,
        "capability": None,
        "context": {"cwd": context["cwd"], "shell": None, "client": context["client"],
                    "session_id": context["session_id"]},
        "intent": call.intent, "created_at": timestamp(created_at),
    }  # fmt: skip
    problems = [
        what
        for what, bad in (
            ("id", not _IDENTIFIER.match(pid) or pid.startswith("rq_")),
            ("agent", not _TOKEN.match(agent)),
            ("workspace", not _TOKEN.match(workspace)),
            ("tool", not 1 <= len(call.tool) <= 200),
            ("intent", call.intent is not None and len(call.intent) > 4000),
            ("context.cwd", call.cwd is not None and len(call.cwd) > 4096),
            ("context.client", len(call.client) > 64),
            ("context.session_id", call.session_id is not None and len(call.session_id) > 200),
        )
        if bad
    ]
    if problems:
        raise ValueError(f"the call cannot be proposed: invalid {', '.join(problems)}")
    return body


@dataclass
class Event:
    """A verified event of the service about one proposal: held, released or blocked."""

    kind: str
    body: dict[str, Any]

    @property
    def outcome(self) -> bool:
        return self.kind != "held"

    def answer(self, call: HookCall) -> Answer:
        if self.kind == "released":
            return released_answer(call, self.body.get("request_id"), self.body["arguments"])
        return blocked_answer(
            self.body["outcome"], self.body["reason"], self.body.get("request_id")
        )


def _well_formed(kind: str, body: dict[str, Any]) -> bool:
    request_id = body.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        return False
    if kind == "released":
        return isinstance(body.get("arguments"), dict)
    if kind == "blocked":
        return body.get("outcome") in BLOCKED and isinstance(body.get("reason"), str)
    return isinstance(request_id, str)


@dataclass
class State:
    """What is known of a proposal: its status and request, its outcome once there is one."""

    status: str
    request_id: str | None
    created_at: datetime
    outcome: Event | None = None


_T = TypeVar("_T")


class Session:
    """One hook call's conversation with the service, within `deadline` (monotonic)."""

    def __init__(
        self, conn: Connection, subjects: Subjects, agent: str, workspace: str,
        key: str | None, deadline: float,
        reopen: Callable[[float], Connection] | None = None,
    ) -> None:  # fmt: skip
        self.conn = conn
        self.subjects = subjects
        self.agent = agent
        self.workspace = workspace
        self.key = key
        self.deadline = deadline
        #: Opens another connection within a timeout (seconds): a connection lost at any
        #: step (a server restarted, a cluster's node gone) is replaced and the step taken
        #: again, within the hook's deadline. None: a lost connection ends the call.
        self.reopen = reopen
        self.watching: str | None = None
        self.results: set[int] = set()

    # ------------------------------------------------------------------ time
    def left(self, timeout: float) -> float:
        """`timeout`, cut to what is left of the hook's budget (TimeoutError when none)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer within the hook's time budget")
        return min(timeout, left)

    # ------------------------------------------------------------------ trust
    def service_key(self) -> str:
        if self.key is None:
            self.key = self._ask_key()
        return self.key

    def _ask_key(self) -> str:
        subject = f"{self.subjects.prefix}.api.key"
        try:
            msg = self.conn.request(subject, b"{}", timeout=self.left(KEY_TIMEOUT))
        except NatsError as exc:
            raise ConnectError(
                f"cannot learn the Headgate service's key on {subject} ({exc or 'no answer'}); "
                "set HEADGATE_SERVICE_KEY to the key in the service's data dir (service.pub)"
            ) from exc
        return key_from_answer(subject, msg.subject, msg.data, msg.headers)

    def verified(self, msg: Msg) -> bool:
        return verify_event(self.service_key(), msg.subject, msg.data, msg.headers)

    def require(self, msg: Msg) -> None:
        if self.verified(msg):
            return
        headers = msg.headers or {}
        why = (
            "no service signature"
            if SIGNATURE_HEADER not in headers
            else f"signed by {headers.get(SIGNER_HEADER) or 'another key'}, not by the service "
            f"key {self.key}"
        )
        raise ConnectError(
            f"the message on {msg.subject} is not the Headgate service's ({why}); it was ignored"
        )

    # ------------------------------------------------------------------ API
    def ask(self, subject: str, body: Mapping[str, Any], timeout: float = ASK_TIMEOUT) -> Any:
        try:
            msg = self.conn.request(subject, dumps(body), timeout=self.left(timeout))
        except NoResponders as exc:
            raise ConnectError(
                f"no Headgate service answers on {subject} (is it running, with the same prefix?)"
            ) from exc
        except NatsTimeout as exc:
            raise ConnectError(f"the Headgate service did not answer within {timeout:g}s") from exc
        except NatsPermissionError as exc:
            raise ConnectError(f"cannot ask {subject}: {exc}") from exc
        if ".api." in subject:
            self.require(msg)
        data = json.loads(msg.data)
        if isinstance(data, dict) and set(data) == {"error"}:
            raise ApiRefused(str(data["error"]))
        return data

    def history(self, pid: str) -> dict[str, Any] | None:
        """The proposal's history from the service (its agent's status subject), or None
        when it does not know the id."""
        try:
            found = self.ask(self.subjects.api_status(self.agent), {"id": pid})
        except ApiRefused:
            return None
        if not (
            isinstance(found, dict)
            and isinstance(found.get("status"), str)
            and isinstance(found.get("proposal"), dict)
            and isinstance(found.get("events"), list)
            and all(isinstance(e, dict) for e in found["events"])
        ):
            raise ConnectError(f"the service's answer about {pid} is not a proposal history")
        return found

    def current(self, base: str) -> tuple[int, dict[str, Any] | None]:
        """The highest generation of `base` the service knows, with its history."""
        found: dict[int, dict[str, Any]] = {}
        search = generation_search()
        probe = next(search)
        try:
            while True:
                history = self.history(proposal_id(base, probe))
                if history is not None:
                    found[probe] = history
                probe = search.send(history is not None)
        except StopIteration as done:
            highest: int = done.value
        return (0, None) if highest < 0 else (highest, found[highest])

    def publish(self, subject: str, body: Mapping[str, Any], msg_id: str) -> bool:
        """Publish into JetStream, deduplicated by `msg_id` (True: the server already had it),
        retrying while the server cannot confirm it, as `workflow.client.transport.publish`."""
        data = dumps(body)
        until = min(time.monotonic() + PUBLISH_TIMEOUT, self.deadline)
        delay = 0.05
        while True:
            left = until - time.monotonic()
            try:
                msg = self.conn.request(
                    subject, data, headers={"Nats-Msg-Id": msg_id},
                    timeout=max(min(2.0, left), 0.1),
                )  # fmt: skip
                ack = json.loads(msg.data)
                if not isinstance(ack, dict):
                    raise ConnectError(f"JetStream's answer to the publish on {subject} is no ack")
                error = ack.get("error")
                if not error:
                    return bool(ack.get("duplicate"))
                error = error if isinstance(error, dict) else {"description": error}
                problem: Exception = NatsError(str(error.get("description") or error))
                if error.get("code") != 503:
                    raise ConnectError(f"JetStream refused the publish on {subject}: {problem}")
            except (NatsTimeout, NoResponders) as exc:
                problem = exc
            if time.monotonic() + delay >= until:
                raise ConnectError(
                    f"JetStream did not confirm the publish on {subject} within "
                    f"{PUBLISH_TIMEOUT:g}s ({str(problem) or type(problem).__name__})"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------------ results
    def listen(self) -> None:
        """Receive this agent's events from now on: a core subscription to its results
        subjects, or, where the server refuses that, a consumer of the results stream."""
        subjects = [
            self.subjects.held(self.agent),
            self.subjects.released(self.agent),
            self.subjects.blocked(self.agent),
        ]
        sids = [self.conn.subscribe(s) for s in subjects]
        self.conn.flush(self.left(ASK_TIMEOUT))
        if not set(subjects) & set(self.conn.refused):
            self.results.update(sids)
            return
        for sid in sids:
            self.conn.unsubscribe(sid)
        self.results.add(self.consumer({"deliver_policy": "new"}))

    def consumer(self, start: dict[str, Any]) -> int:
        """An ephemeral consumer of this agent's results delivering to the private inbox
        (its subscription id); it ends on its own once nobody listens."""
        deliver = self.conn.new_subject()
        sid = self.conn.subscribe(deliver)
        stream = self.subjects.stream("results")
        # Named, and created through the subject that carries its filter: the server checks
        # the filter there, so a user may be allowed only its own results (see deploy/nats).
        name, only = f"{self.agent}-{os.urandom(6).hex()}", self.subjects.results(self.agent)
        config = {
            **start, "name": name, "ack_policy": "none", "filter_subject": only,
            "deliver_subject": deliver, "mem_storage": True, "num_replicas": 1,
            "inactive_threshold": 5_000_000_000,
        }  # fmt: skip
        try:
            answer = self.conn.request(
                f"$JS.API.CONSUMER.CREATE.{stream}.{name}.{only}",
                dumps({"stream_name": stream, "config": config}),
                timeout=self.left(ASK_TIMEOUT),
            )
        except NatsError as exc:
            raise ConnectError(f"cannot read this agent's results on {stream}: {exc}") from exc
        created = json.loads(answer.data)
        if not isinstance(created, dict) or created.get("error"):
            problem = created.get("error") if isinstance(created, dict) else created
            raise ConnectError(f"cannot read this agent's results on {stream}: {problem}")
        return sid

    def event(self, msg: Msg, pid: str) -> Event | None:
        """The verified event of proposal `pid` in a message, else None (ignored)."""
        kind = next(
            (k for k in ("released", "blocked", "held")
             if self.subjects.token_after(msg.subject, k) == self.agent),
            None,
        )  # fmt: skip
        if kind is None:
            return None
        try:
            body = json.loads(msg.data)
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("proposal_id") != pid:
            return None
        try:
            if not self.verified(msg):
                return None  # not the service's: whoever sent it, it decides nothing
        except ConnectError:
            return None  # the key cannot be learnt now: the status check finds the outcome
        return Event(kind, body) if _well_formed(kind, body) else None

    def next_event(self, pid: str, timeout: float, *, outcome: bool = False) -> Event | None:
        """The next event of `pid` (only an outcome with `outcome`) within `timeout` seconds."""
        until = time.monotonic() + max(timeout, 0.0)
        while True:
            msg = self.conn.next_msg(max(until - time.monotonic(), 0.0))
            if msg is None:
                return None
            if msg.sid in self.results:
                found = self.event(msg, pid)
                if found is not None and (found.outcome or not outcome):
                    return found

    def find(self, pid: str, since: datetime, timeout: float = 10.0) -> Event | None:
        """The outcome of `pid` published before this process listened: read this agent's
        results from `since` (minus clock slack) to the end of the stream."""
        start = {
            "deliver_policy": "by_start_time",
            "opt_start_time": timestamp(since - CLOCK_SLACK),
        }
        sid = self.consumer(start)
        until = time.monotonic() + self.left(timeout)
        try:
            while time.monotonic() < until:
                msg = self.conn.next_msg(min(0.5, max(until - time.monotonic(), 0.01)))
                if msg is None:
                    return None  # a new consumer delivers at once: silence means nothing left
                if msg.sid != sid and msg.sid not in self.results:
                    continue
                found = self.event(msg, pid)
                if found is not None and found.outcome:
                    return found
                if msg.sid == sid and _num_pending(msg.reply) == 0:
                    return None
        finally:
            self.conn.unsubscribe(sid)
        return None

    # ------------------------------------------------------------------ the flow
    def gate(self, call: HookCall, wait: float, on_pending: str = OnPending.DENY) -> Answer:
        """Propose the call (or find the proposal an earlier attempt made) and wait up to
        `wait` seconds for its outcome (then deny or defer, by `on_pending`):
        `workflow.adapters.gate.gate`."""
        try:
            self.listen()
        except NatsConnectionLost as lost:
            self.recover(lost, self.deadline)  # listens on the new connection
        base = proposal_base(call, self.agent, self.workspace)
        generation, found = self.reconnecting(lambda: self.current(base))
        if found is not None and spent(found["status"], _kinds(found)):
            generation, found = generation + 1, None
        pid = proposal_id(base, generation)
        state = self.propose(call, pid) if found is None else _state(found)
        return self.outcome(call, pid, state, wait, on_pending)

    def propose(self, call: HookCall, pid: str) -> State:
        """Publish the proposal; its state once the service has classified it."""
        created = datetime.now(UTC)
        body = proposal_body(call, pid, self.agent, self.workspace, created)
        subject, msg_id = self.subjects.proposals(self.agent), proposal_msg_id(self.agent, pid)
        # Published again on a new connection: JetStream keeps one copy (the message id).
        self.reconnecting(lambda: self.publish(subject, body, msg_id))
        # The first event usually comes at once.
        first = self.reconnecting(lambda: self.next_event(pid, self.left(0.1)))
        known: dict[str, Any] | None = None
        if first is None:
            until = time.monotonic() + CLASSIFY_TIMEOUT
            delay = 0.005
            while True:
                try:
                    try:
                        known = self.history(pid)
                    except ConnectError:
                        known = None  # the service may be restarting: keep asking until the end
                    first = self.next_event(pid, 0)
                    if first is not None or known is not None:
                        break
                    if time.monotonic() >= until:
                        break
                    first = self.next_event(pid, self.left(min(delay, until - time.monotonic())))
                    if first is not None:
                        break
                except NatsConnectionLost as lost:
                    # An event sent meanwhile was missed: the next turn asks the service.
                    self.recover(lost, self.deadline)
                delay = min(delay * 2, 0.25)
        if first is not None:
            if first.kind == "blocked" and first.body["outcome"] == "invalid":
                raise HeadgateError(f"{call.tool} was invalid: {first.body['reason']}")
            state = _state_from_event(first, created)
            if state is not None:
                return state
            known = self.reconnecting(lambda: self.history(pid))
        if known is None:
            raise HeadgateError(
                f"proposal {pid} was published but not classified within "
                f"{CLASSIFY_TIMEOUT:g}s; is the Headgate service running with the same prefix?"
            )
        return _state(known)

    def outcome(
        self, call: HookCall, pid: str, state: State, wait: float,
        on_pending: str = OnPending.DENY,
    ) -> Answer:  # fmt: skip
        """The answer once the outcome is known, or "pending" after `wait` seconds."""
        if state.outcome is not None:
            return state.outcome.answer(call)
        until = time.monotonic() + wait
        status = state.status
        while True:
            try:
                if is_terminal(status):  # it ended before this process listened: read it back
                    found = self.find(pid, state.created_at)
                    if found is not None:
                        return found.answer(call)
                left = max(until - time.monotonic(), 0.0)
                event = self.next_event(pid, self.left(min(RECHECK, left)), outcome=True)
                if event is not None:
                    return event.answer(call)
            except NatsConnectionLost as lost:
                # Events published while the connection was down were missed: listen again,
                # then ask the service at once (and `find` reads a finished call's outcome).
                self.recover(lost, until)
            try:
                history = self.history(pid)
            except ConnectError:
                history = None
            except NatsConnectionLost:
                history = None  # the next turn of the loop opens another connection
            status = history["status"] if history is not None else status
            if time.monotonic() >= until:
                return pending_answer(state.request_id, pid, wait, on_pending)

    def reconnecting(self, step: Callable[[], _T]) -> _T:
        """`step()`; taken again on a new connection when this one is lost (`reopen`), so
        `step` must be safe to repeat: a read, or a publish deduplicated by its id."""
        while True:
            try:
                return step()
            except NatsConnectionLost as lost:
                self.recover(lost, self.deadline)

    def recover(self, lost: NatsConnectionLost, until: float) -> None:
        """After `lost`: raise it when this session may not make a new connection (no
        `reopen`), else replace the connection and listen again (`resume`)."""
        if self.reopen is None:
            raise lost
        self.resume(until)

    def resume(self, until: float) -> None:
        """Replace a lost connection (before `until`, monotonic, and the hook's deadline) and
        listen for this agent's events on the new one; `ConnectError` when none could be made."""
        assert self.reopen is not None
        self.conn.close()
        last: Exception | None = None
        while (left := min(until, self.deadline) - time.monotonic()) > 0:
            try:
                self.conn = self.reopen(left)
                self.results.clear()
                self.listen()
                return
            except NatsPermissionError:
                raise
            except (NatsError, ConnectError) as exc:  # gone again, or not back yet
                last = exc
                self.conn.close()
                time.sleep(min(0.2, max(min(until, self.deadline) - time.monotonic(), 0.0)))
        raise ConnectError(f"the connection to NATS was lost and not made again in time ({last})")

    def report(self, call: HookCall) -> str | None:
        """Report a call that ran as executed, once, if Headgate released it and it was not
        reported yet (`workflow.adapters.gate.report`); returns the proposal reported."""
        base = proposal_base(call, self.agent, self.workspace)
        generation, found = self.current(base)
        if found is None or found["status"] != Outcome.RELEASED or executed(_kinds(found)):
            return None
        pid = proposal_id(base, generation)
        release = release_id_for(pid)
        body = {
            "release_id": release, "proposal_id": pid, "agent": self.agent,
            "success": call.succeeded, "summary": call.summary,
            "finished_at": timestamp(datetime.now(UTC)),
        }  # fmt: skip
        self.publish(self.subjects.executed(self.agent), body, report_msg_id(self.agent, release))
        return pid


def _kinds(history: dict[str, Any]) -> list[str]:
    return [e.get("kind") for e in history["events"] if isinstance(e.get("kind"), str)]


def _created(history: dict[str, Any]) -> datetime:
    text = history["proposal"].get("created_at")
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else datetime.now(UTC)
    except ValueError:
        return datetime.now(UTC)


def _state(history: dict[str, Any]) -> State:
    request_id = history.get("request_id")
    return State(
        history["status"], request_id if isinstance(request_id, str) else None, _created(history)
    )


def _state_from_event(event: Event, created: datetime) -> State | None:
    """The state a first event says (None for a bare cancellation: ask the history)."""
    body = event.body
    if body.get("classification") is None or body.get("verdict") is None:
        return None
    if event.kind == "held":
        return State(PENDING, body["request_id"], created)
    status = Outcome.RELEASED if event.kind == "released" else body["outcome"]
    return State(status, body.get("request_id"), created, event)


def _num_pending(reply: str | None) -> int | None:
    """The messages left after this one, from a JetStream delivery's ack subject."""
    tokens = (reply or "").split(".")
    if tokens[:2] != ["$JS", "ACK"]:
        return None
    index = 8 if len(tokens) == 9 else 10 if len(tokens) >= 11 else None
    try:
        return int(tokens[index]) if index is not None else None
    except ValueError:
        return None


def decide(call: HookCall, options: GateOptions, budget: float) -> Answer:
    """Headgate's answer to one hook event within `budget` seconds (the call has been
    reported, for an `after`): `workflow.adapters.gate.decide` without the SDK."""
    if call.phase is Phase.OTHER:
        return NEUTRAL
    for what, value in (("agent", options.agent), ("workspace", options.workspace)):
        if not _TOKEN.match(value):  # it goes into subjects: letters, digits, - and _ only
            raise ValueError(f"the {what} name {value!r} is not a valid subject token")
    deadline = time.monotonic() + budget
    target = resolve_nats(
        options.nats_url, role=Role.AGENT, data_dir=options.data_dir, agent=options.agent
    )
    key = pinned_key(data_dir=options.data_dir)
    subjects = Subjects(options.prefix)
    timeout = min(options.connect_timeout, budget)
    name = f"headgate-agent-{options.agent}"
    opened: list[Connection] = []

    def reopen(within: float) -> Connection:
        conn = open_connection(target, name=name, timeout=within)
        opened.append(conn)
        return conn

    try:
        with connect(target, name=name, timeout=timeout) as conn:
            session = Session(
                conn, subjects, options.agent, options.workspace, key, deadline, reopen
            )
            if call.phase is Phase.AFTER:
                session.reconnecting(lambda: session.report(call))
                return NEUTRAL
            return session.gate(call, options.wait, options.on_pending)
    except NatsError as exc:
        raise ConnectError(str(exc)) from exc
    finally:
        for conn in opened:
            conn.close()
