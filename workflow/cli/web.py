"""`headgate web …`: the web inbox's commands."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from workflow import datadir
from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    KeyOpt,
    NatsUrl,
    Prefix,
    connected,
    fail,
    load_key,
    print_json,
)
from workflow.errors import ConfigError

web_app = typer.Typer(
    help="The web inbox: approve from a browser or a phone, signed with a passkey.",
    no_args_is_help=True,
)


def _link_base(url: str | None, data_dir: Path) -> str | None:
    if url:
        return url.rstrip("/")
    recorded = data_dir / datadir.WEB_URL_FILE
    return recorded.read_text().strip().rstrip("/") if recorded.exists() else None


@web_app.command()
def invite(
    name: Annotated[str, typer.Argument(help="The approver (as named in the policy).")],
    ttl: Annotated[
        str, typer.Option("--ttl", help="How long the link works: '30m', '2h', seconds.")
    ] = "30m",
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar="HEADGATE_WEB_URL",
            help="The inbox's address as browsers reach it. Default: what `serve --web-port` "
            "recorded in the data dir.",
        ),
    ] = None,
    key: KeyOpt = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Print a one-time link that registers a passkey for approver NAME on the device that
    opens it. Signed with your approver key: an admin may invite anyone, an approver only
    themselves."""
    import asyncio

    # Imported when the command runs: `headgate --help` loads neither NATS nor the models.
    from workflow.client import transport
    from workflow.messages import WebInvite, WebInviteReply
    from workflow.policy.durations import format_duration, parse_duration
    from workflow.subjects import Subjects

    try:
        seconds = int(parse_duration(ttl))
    except ValueError as exc:
        fail(str(exc))
    if not 60 <= seconds <= 7 * 86400:
        fail("--ttl must be between 1 minute and 7 days")
    signer = load_key(key, data_dir)
    subjects = Subjects(prefix)
    request = WebInvite(
        approver=name, ttl_seconds=seconds, nonce=uuid.uuid4().hex,
        issued_at=datetime.now(UTC), key=signer.public_key, signature_scheme="rfc8785",
    )  # fmt: skip
    request = request.model_copy(update={"signature": signer.sign(request.signing_payload())})

    async def ask() -> WebInviteReply:
        async with connected(nats_url, data_dir) as nc:
            return await transport.ask(nc, subjects.api_web("invite"), request, WebInviteReply)

    try:
        reply = asyncio.run(ask())
    except transport.ApiRefused as exc:
        fail(str(exc))
    base = _link_base(url, data_dir)
    link = f"{base}/invite/{reply.token}" if base else reply.url
    if link is None:
        raise ConfigError(
            "the service serves no web inbox here: start it with `serve --web-port PORT`, or "
            "pass --url with the address browsers reach it at"
        )
    if json_out:
        print_json({"approver": reply.approver, "url": link, "expires_at": reply.expires_at})
        return
    out = Console(highlight=False, soft_wrap=True)
    out.print(link)
    out.print(
        f"[dim]One use, for {reply.approver}; expires in {format_duration(seconds)} "
        f"({reply.expires_at:%Y-%m-%d %H:%M} UTC). Open it on the device that will hold "
        "the passkey.[/]"
    )
