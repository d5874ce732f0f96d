"""A decision that arrives again as a new message is a replay, refused and audited; the
redelivery of a message whose effects were committed re-sends its events instead."""

from __future__ import annotations

import json
from pathlib import Path

from tests.service.helpers import decision, send_decision, wait_until
from tests.service.test_security import KEYS, assert_not_released, guarded, held_write


async def test_the_same_signed_decision_as_a_new_message_is_refused_and_audited(
    nats_url: str, tmp_path: Path
) -> None:
    async with guarded(nats_url, tmp_path, quorum=2) as h:
        pid, item = await held_write(h)
        first = decision(KEYS["alice"], item["request_id"], item["proposal_digest"])
        await send_decision(h.nc, h.subjects, first)
        await wait_until(lambda: h.service_history(pid), lambda hi: len(hi["approvals"]) == 1)
        await h.nc.jetstream().publish(
            h.subjects.decisions(item["request_id"]),
            first.model_dump_json().encode(),
            headers={"Nats-Msg-Id": "the-same-bytes-again"},
        )

        async def refused_copies() -> list[dict[str, object]]:
            assert h.service.ctx is not None
            rows = await h.service.ctx.store.audit.rows()
            return [
                data
                for r in rows
                if r.kind == "decision.refused"
                and (data := json.loads(r.data)).get("nonce") == first.nonce
            ]

        [audited] = await wait_until(refused_copies, bool)
        assert audited["refusal"] == "replay"
        assert "already used" in str(audited["message"])
        await assert_not_released(h, pid)
        assert len((await h.service_history(pid))["approvals"]) == 1
