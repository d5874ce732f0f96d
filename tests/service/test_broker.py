"""Unit tests of the FastStream handlers on its in-memory broker (no NATS server): every query
is answered, a bad one with an error sentence. Integration tests run on a real nats-server."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

from faststream.nats import TestNatsBroker

from workflow.policy.model import default_policy
from workflow.service.broker import build_app
from workflow.service.context import ServiceContext
from workflow.signing import ServiceKey
from workflow.subjects import Subjects

SUBJECTS = Subjects("hgunit")
CATALOG = {
    "tools": [
        {"name": "read_file", "description": "Reads a file.", "inputSchema": {"type": "object"}},
        {"name": "delete_file", "description": "Deletes a file.", "inputSchema": {}},
    ]
}


def app() -> Any:
    # The offered query reads only the policy (and the answer is signed with the service key);
    # the rest of the context is not touched.
    ctx = cast(
        ServiceContext,
        SimpleNamespace(policy=default_policy(), subjects=SUBJECTS, signer=ServiceKey.generate()),
    )
    return build_app(SUBJECTS, context=lambda: ctx)


async def ask(subject: str, body: bytes) -> dict[str, Any]:
    async with TestNatsBroker(app()) as broker:
        reply = await broker.request(body, subject)
        return cast(dict[str, Any], json.loads(reply.body))


async def test_an_offered_query_is_answered_with_the_split() -> None:
    query = {"agent": "coder", "tools": CATALOG}
    answer = await ask(SUBJECTS.api("offered"), json.dumps(query).encode())
    assert [t["name"] for t in answer["allowed"]] == ["read_file"]
    assert [t["name"] for t in answer["denied"]] == ["delete_file"]


async def test_a_malformed_query_is_answered_with_an_error_sentence() -> None:
    answer = await ask(SUBJECTS.api("offered"), b'{"agent": "coder", "tols": {}}')
    assert answer["error"].startswith("Invalid offered request: tools: Field required")
    answer = await ask(SUBJECTS.api("pending"), b"not json")
    assert answer["error"].startswith("Invalid pending request:")
