"""`headgate dead`: the dead letters — input a stage could not process — with their errors."""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Annotated, Any

import typer

from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    NatsUrl,
    Prefix,
    connected,
    console,
    print_json,
)
from workflow.errors import ConfigError
from workflow.subjects import Subjects

if TYPE_CHECKING:
    from nats.js import JetStreamContext

STAGES = ("intake", "collector", "auditor")


def dead(
    stage: Annotated[
        str | None,
        typer.Option("--stage", help=f"Only this stage's: {', '.join(STAGES)}."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="Show the last N.")] = 50,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """List dead letters, oldest first: what could not be processed, where, and why.

    They are kept 30 days on the HEADGATE_DEAD stream. A payload longer than 32 KiB is shown
    cut; its size and sha256 identify the whole of it. Secrets in the payload and the error
    are masked (••••), in the table and in --json alike.
    """
    import asyncio

    if stage is not None and stage not in STAGES:
        raise ConfigError(f"--stage must be one of {', '.join(STAGES)}, not {stage!r}")
    subjects = Subjects(prefix)

    async def run() -> list[dict[str, Any]]:
        from workflow.client.connection import Role

        # An operator's command on the service's own stream: the service's credentials (an
        # approver's may not read JetStream streams on the embedded server).
        async with connected(nats_url, data_dir, role=Role.SERVICE) as nc:
            return await read_dead_letters(nc.jetstream(), subjects, stage, limit)

    letters = asyncio.run(run())
    if json_out:
        print_json(letters)
        return
    if not letters:
        console.print("no dead letters" + (f" from {stage}" if stage else ""))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{len(letters)} dead letter(s), oldest first", show_lines=True)
    for column in ("seq", "received", "stage", "subject", "deliveries", "payload", "error"):
        table.add_column(column, overflow="fold")
    for letter in letters:
        size = letter.get("payload_size") or len(letter.get("payload", ""))
        cut = " (cut)" if letter.get("truncated") else ""
        table.add_row(
            str(letter["seq"]),
            str(letter.get("received_at", ""))[:19].replace("T", " "),
            letter.get("stage", "?"),
            Text(letter.get("subject", "?")),
            str(letter.get("deliveries", "")),
            f"{size} bytes{cut}",
            Text(letter.get("error", "")),
        )
    console.print(table)


async def read_dead_letters(
    js: JetStreamContext, subjects: Subjects, stage: str | None, limit: int
) -> list[dict[str, Any]]:
    """The last `limit` dead letters (of `stage`, or all), oldest first, with their sequence."""
    from nats.js.errors import NotFoundError

    stream = subjects.stream("dead")
    wanted = subjects.dead(stage or "*")
    try:
        info = await js.stream_info(stream, subjects_filter=wanted)
    except NotFoundError:
        raise ConfigError(
            f"no stream {stream}: is a service with the prefix {subjects.prefix!r} running?"
        ) from None
    total = sum((info.state.subjects or {}).values())
    if total == 0:
        return []
    sub = await js.subscribe(wanted, ordered_consumer=True, stream=stream)
    letters: deque[dict[str, Any]] = deque(maxlen=limit)
    try:
        seen = 0
        while seen < total:
            try:
                msg = await sub.next_msg(timeout=2.0)
            except TimeoutError:
                break
            seen += 1
            seq = msg.metadata.sequence.stream
            try:
                body = json.loads(msg.data)
            except ValueError:
                body = {
                    "error": "(not a dead letter)",
                    "payload": msg.data.decode(errors="replace"),
                }
            letters.append({"seq": seq, **masked_letter(body)})
            if msg.metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return list(letters)


def masked_letter(body: Any) -> dict[str, Any]:
    """A dead letter as shown: credential-looking values in its payload (a proposal that could
    not be read still carries the call's arguments) and its error masked."""
    from workflow.masking import mask_secrets, mask_text

    if not isinstance(body, dict):
        return {"error": "(not a dead letter)", "payload": mask_text(json.dumps(body))}
    shown = dict(body)
    payload = shown.get("payload")
    if isinstance(payload, str):
        try:
            parsed = json.loads(payload)
        except ValueError:
            shown["payload"] = mask_text(payload)
        else:
            shown["payload"] = json.dumps(mask_secrets(parsed), ensure_ascii=False)
    if isinstance(shown.get("error"), str):
        shown["error"] = mask_text(shown["error"])
    return shown
