"""Policy commands: `policy check`, `explain`, `tools offered`, `tools pin`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from workflow.cli.backtest import backtest
from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    NatsUrl,
    Prefix,
    api_call,
    connected,
    console,
    err_console,
    print_json,
)
from workflow.errors import ConfigError, describe_invalid
from workflow.subjects import Subjects

if TYPE_CHECKING:
    from pydantic import ValidationError

    from workflow.classify.engine import classify
    from workflow.client.display import mask_secrets, mask_text
    from workflow.messages import (
        Classification,
        GetQuery,
        OfferedQuery,
        OfferedReply,
        Proposal,
        ProposalHistory,
        Verdict,
    )
    from workflow.policy.catalog import (
        CatalogTool,
        load_catalog_text,
        offered_tools,
        parse_catalog,
        pin_tools,
        review_catalog,
    )
    from workflow.policy.coverage import approval_gaps
    from workflow.policy.engine import evaluate
    from workflow.policy.explain import explain_data, explain_lines
    from workflow.policy.load import load_policy
    from workflow.policy.model import Policy, default_policy


def _runtime() -> None:
    """Import what the commands use, when one runs: the classifier and the policy engine are
    not loaded when the CLI starts (see `workflow.cli.common`)."""
    from pydantic import ValidationError  # noqa: F401

    from workflow.classify.engine import classify  # noqa: F401
    from workflow.client.display import mask_secrets, mask_text  # noqa: F401
    from workflow.messages import (  # noqa: F401
        Classification,
        GetQuery,
        OfferedQuery,
        OfferedReply,
        Proposal,
        ProposalHistory,
        Verdict,
    )
    from workflow.policy.catalog import (  # noqa: F401
        CatalogTool,
        load_catalog_text,
        offered_tools,
        parse_catalog,
        pin_tools,
        review_catalog,
    )
    from workflow.policy.coverage import approval_gaps  # noqa: F401
    from workflow.policy.engine import evaluate  # noqa: F401
    from workflow.policy.explain import explain_data, explain_lines  # noqa: F401
    from workflow.policy.load import load_policy  # noqa: F401
    from workflow.policy.model import Policy, default_policy  # noqa: F401

    globals().update(locals())


policy_app = typer.Typer(help="Check a policy file.", no_args_is_help=True)
tools_app = typer.Typer(
    help="What tools to offer agents; pin tool definitions.", no_args_is_help=True
)

ToolsOpt = Annotated[
    Path | None,
    typer.Option("--tools", help="A tool catalog: an MCP tools/list answer as JSON."),
]


def _catalog(path: Path) -> list[CatalogTool]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the tool catalog: {exc.strerror}", source=str(path)
        ) from exc
    return load_catalog_text(text, source=str(path))


@policy_app.command("check")
def policy_check(
    file: Annotated[Path, typer.Argument(help="The policy file (TOML).")],
    tools: ToolsOpt = None,
    json_out: JsonOut = False,
) -> None:
    """Validate a policy file; with --tools, list every tool that is not a pure read and has
    no explicit entry (exit 1 when there is one)."""
    _runtime()
    policy = load_policy(file)
    gaps = [gap.sentence() for gap in approval_gaps(policy)]
    if not json_out:
        for gap in gaps:
            err_console.print(f"[yellow]warning:[/] {escape(gap)}", highlight=False)
    if tools is None:
        if json_out:
            print_json({"ok": True, "revision": policy.revision, "warnings": gaps})
        else:
            console.print(f"[green]{escape(str(file))} is valid[/] (revision {policy.revision})")
        return
    review = review_catalog(policy, _catalog(tools))
    if json_out:
        print_json(
            {
                "ok": not review.unreviewed,
                "revision": policy.revision,
                "warnings": gaps,
                "unreviewed": [u.sentence() for u in review.unreviewed],
                "inherited": [i.sentence() for i in review.inherited],
                "reviewed": review.reviewed,
                "reads": review.reads,
            }
        )
    else:
        console.print(
            f"{file}: valid (revision {policy.revision}); {len(review.reviewed)} "
            f"reviewed, {len(review.reads)} pure reads, {len(review.inherited)} "
            f"inherited, {len(review.unreviewed)} without an explicit entry"
        )
        for inh in review.inherited:
            console.print(f"  inherited: {escape(inh.sentence())}", highlight=False)
        for u in review.unreviewed:
            console.print(f"  [red]unreviewed:[/] {escape(u.sentence())}", highlight=False)
    if review.unreviewed:
        raise typer.Exit(1)


def explain(
    ident: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="Proposal or request id.")
    ] = None,
    proposal: Annotated[
        Path | None,
        typer.Option("--proposal", help="Explain a proposal JSON file offline, with --policy."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", envvar="HEADGATE_POLICY", help="Policy file.")
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Print the policy trail that decided a proposal: each step that applied, and why."""
    import asyncio

    _runtime()
    if (ident is None) == (proposal is None):
        raise ConfigError("give either a proposal/request ID or --proposal FILE")
    if proposal is not None:
        try:
            data = json.loads(proposal.read_text())
            call = Proposal.model_validate({"id": "offline", "agent": "offline", **data})
        except OSError as exc:
            raise ConfigError(f"cannot read {proposal}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{proposal} is not JSON: {exc.msg}") from exc
        except ValidationError as exc:
            raise ConfigError(f"{proposal}: invalid proposal: {describe_invalid(exc)}") from exc
        pol: Policy = load_policy(policy) if policy else default_policy()
        cls = classify(call, pol.tables_for(call.tool, call.tool_definition))
        _print_explanation(evaluate(call, cls, pol), cls, call, json_out)
        return
    assert ident is not None

    async def run() -> ProposalHistory:
        async with connected(nats_url, data_dir) as nc:
            return await api_call(
                nc, Subjects(prefix), "explain", GetQuery(id=ident), ProposalHistory
            )

    h = asyncio.run(run())
    _print_explanation(h.verdict, h.classification, h.proposal, json_out)


def _print_explanation(
    verdict: Verdict, cls: Classification, call: Proposal, json_out: bool
) -> None:
    if json_out:  # secrets masked here too: the trail quotes arguments and commands
        print_json(mask_secrets(explain_data(verdict, cls, call)))
        return
    for line in explain_lines(verdict, cls, call):
        console.print(mask_text(line), highlight=False, markup=False)


@tools_app.command("offered")
def tools_offered(
    agent: Annotated[str, typer.Option("--agent")],
    tools: Annotated[Path, typer.Option("--tools", help="MCP tools/list answer (JSON).")],
    workspace: Annotated[str, typer.Option("--workspace")] = "default",
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Planning mode: reads only.")
    ] = False,
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy", help="Decide offline with this file instead of asking the running service."
        ),
    ] = None,
    nats_url: NatsUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    prefix: Prefix = "headgate",
    json_out: JsonOut = False,
) -> None:
    """Which tools an agent should be offered: allowed and approvable ones, not denied ones.
    Every call is still decided again when it is made."""
    import asyncio

    _runtime()
    try:
        raw: Any = json.loads(tools.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read the tool catalog {tools}: {exc}") from exc
    if policy is not None:
        reply = offered_tools(
            load_policy(policy), parse_catalog(raw, source=str(tools)), agent, workspace, read_only
        )
    else:
        query = OfferedQuery(
            agent=agent,
            workspace=workspace,
            read_only=read_only,
            tools=raw if isinstance(raw, dict) else {"tools": raw},
        )

        async def run() -> OfferedReply:
            async with connected(nats_url, data_dir) as nc:
                return await api_call(nc, Subjects(prefix), "offered", query, OfferedReply)

        reply = asyncio.run(run())
    if json_out:
        print_json(reply)
        return
    for title, items in (
        ("allowed", reply.allowed),
        ("approvable", reply.approvable),
        ("not offered", reply.denied),
    ):
        console.print(f"[bold]{title}[/] ({len(items)})")
        for t in items:
            console.print(f"  {escape(t.name)}: {escape(t.reason)}", highlight=False)


@tools_app.command("pin")
def tools_pin(
    policy: Annotated[
        Path, typer.Option("--policy", envvar="HEADGATE_POLICY", help="Policy file to update.")
    ],
    tools: ToolsOpt = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: Annotated[
        str | None, typer.Option("--database-url", envvar="HEADGATE_DATABASE_URL")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the new file instead.")] = False,
) -> None:
    """Record tool definition hashes in the policy's [lock] section (comments are kept).

    From --tools FILE, or else from the tool definitions of proposals the service has seen.
    A tool whose definition later changes is treated as unknown until pinned again."""
    import asyncio

    _runtime()
    if tools is not None:
        catalog = _catalog(tools)
    else:
        catalog = asyncio.run(_seen_tools(data_dir, database_url))
        if not catalog:
            raise ConfigError("no tool definitions seen yet; pass --tools CATALOG.json")
    try:
        text = policy.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the policy: {exc.strerror}", source=str(policy)) from exc
    new = pin_tools(text, catalog, source=str(policy))
    if dry_run:
        console.print(new, highlight=False, markup=False)
        return
    if new == text:
        console.print(f"{escape(str(policy))}: every tool already pinned ({len(catalog)} checked)")
        return
    tmp = policy.with_suffix(policy.suffix + ".tmp")
    tmp.write_text(new)
    tmp.replace(policy)
    console.print(
        f"{policy}: pinned {len(catalog)} tool definition(s); a running service "
        "reloads the file by itself"
    )


async def _seen_tools(data_dir: Path, database_url: str | None) -> list[CatalogTool]:
    from workflow.cli.offline import _db_url, open_store

    store = await open_store(_db_url(database_url, data_dir))
    try:
        payloads = await store.proposals.seen_definitions()
    finally:
        await store.close()
    latest: dict[str, CatalogTool] = {}
    for payload in payloads:
        p = Proposal.model_validate_json(payload)
        if p.tool_definition is not None:
            latest[p.tool] = CatalogTool(p.tool, p.tool_definition)
    return list(latest.values())


# `policy backtest` replays the audit log against a policy: a module of its own (it reads the
# database), listed after `check` and `show` as before.
policy_app.command("backtest")(backtest)
