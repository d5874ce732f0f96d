"""The README's webhook receiver check accepts what the notifier sends and nothing else."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from tests.client.test_sdk_docs import load
from workflow.notify.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_webhook


def test_the_readme_receiver_verifies_a_signed_delivery() -> None:
    verify = load("webhook")["verify"]
    secret, body = b"k" * 32, json.dumps({"event": "held"}).encode()
    now = str(int(datetime.now(UTC).timestamp()))
    headers = {TIMESTAMP_HEADER: now, SIGNATURE_HEADER: sign_webhook(secret, now, body)}
    assert verify(secret, body, headers)
    assert not verify(b"x" * 32, body, headers)
    assert not verify(secret, body + b" ", headers)
    old = str(int(time.time()) - 3600)
    stale = {TIMESTAMP_HEADER: old, SIGNATURE_HEADER: sign_webhook(secret, old, body)}
    assert not verify(secret, body, stale)
