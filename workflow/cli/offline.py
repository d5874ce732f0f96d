"""Commands that need no NATS: classify, schemas, keys, audit."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape

from workflow import datadir
from workflow.cli.common import (
    DEFAULT_DATA_DIR,
    DataDir,
    JsonOut,
    console,
    err_console,
    print_json,
)
from workflow.errors import ConfigError, describe_invalid

if TYPE_CHECKING:
    from workflow.classify.tables import ClassifierTables
    from workflow.messages import Classification, Proposal
    from workflow.store.repo import Store

T = TypeVar("T")

# Each command imports what it runs (the classifier, the store, …) when it runs: `headgate
# --help` and the client-side commands must not pay for them at start.

PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", envvar="HEADGATE_POLICY", help="Policy file (TOML).")
]


def _tables(policy: Path | None) -> ClassifierTables:
    from workflow.classify.tables import DEFAULT_TABLES
    from workflow.policy.load import load_policy

    return load_policy(policy).classifier_tables() if policy else DEFAULT_TABLES


def classify(
    policy: PolicyOpt = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Print a readable table instead of JSON Lines.")
    ] = False,
) -> None:
    """Classify proposals read as JSON Lines on stdin; one classification per line on stdout.

    `id` and `agent` may be omitted. A bad line gives a JSON error line for that line and the
    exit status is 1 at the end.
    """
    from pydantic import ValidationError

    from workflow.classify.engine import classify as classify_proposal
    from workflow.messages import Proposal

    tables = _tables(policy)
    errors = 0
    for number, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("a line must be a JSON object")
            proposal = Proposal.model_validate({"id": "offline", "agent": "offline", **data})
        except json.JSONDecodeError as exc:
            errors += 1
            _emit_error(number, f"not valid JSON: {exc.msg} at column {exc.colno}", explain)
            continue
        except ValidationError as exc:
            errors += 1
            _emit_error(number, f"invalid proposal: {describe_invalid(exc)}", explain)
            continue
        except ValueError as exc:
            errors += 1
            _emit_error(number, str(exc), explain)
            continue
        result = classify_proposal(proposal, tables)
        if explain:
            _explain(number, proposal, result)
        else:
            sys.stdout.write(
                json.dumps(
                    {"line": number, "tool": proposal.tool, **result.model_dump(mode="json")}
                )
                + "\n"
            )
    sys.stdout.flush()
    if errors:
        raise typer.Exit(1)


def _emit_error(number: int, message: str, explain: bool) -> None:
    if explain:
        console.print(f"[red]line {number}:[/] {escape(message)}")
    else:
        sys.stdout.write(json.dumps({"line": number, "error": message}) + "\n")


def _explain(number: int, proposal: Proposal, result: Classification) -> None:
    from rich.table import Table
    from rich.text import Text

    from workflow.classify.rulebook.spec import deciding_reason

    title = (
        f"line {number}: {proposal.tool} → {result.risk_class} ({result.severity})"
        + (f" [{', '.join(result.categories)}]" if result.categories else "")
        + (" fail-closed" if result.fail_closed else "")
    )
    table = Table(title=Text(title), title_justify="left", show_lines=False)
    decided = deciding_reason(result.reasons, result.risk_class, result.severity)
    table.add_column("", width=1)
    table.add_column("rule")
    table.add_column("class")
    table.add_column("severity")
    table.add_column("reason", overflow="fold")
    for i, r in enumerate(result.reasons):
        mark = "▶" if i == decided else ""
        table.add_row(mark, r.rule, r.risk_class or "", r.severity or "", Text(r.message))
    console.print(table)
    if decided is not None:
        console.print(f"▶ decided by {escape(result.reasons[decided].rule)}")


def rules(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the listing as docs/rules.md has it.")
    ] = False,
) -> None:
    """List the classifier's rules: id, class, severity, categories and what each matches."""
    from rich.table import Table

    from workflow.classify.rulebook import RULEBOOK, render_markdown

    if markdown:
        sys.stdout.write(render_markdown(RULEBOOK.values()))
        return
    table = Table(show_lines=False)
    table.add_column("rule", no_wrap=True)
    for column in ("domain", "class", "severity", "categories", "matches"):
        table.add_column(column, overflow="fold")
    for spec in RULEBOOK.values():
        table.add_row(
            spec.id,
            spec.domain,
            spec.risk.value if spec.risk is not None else "(note)",
            spec.severity,
            ", ".join(c.value for c in spec.categories),
            escape(spec.matches),
        )
    console.print(table)


def schemas(
    out: Annotated[Path, typer.Option("--out", help="Directory to write.")] = Path("schemas"),
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 if the files differ from the models.")
    ] = False,
) -> None:
    """Write the JSON Schema of every wire message (and an AsyncAPI document)."""
    from workflow.schemas import write_schemas

    changed = write_schemas(out, check=check)
    if check:
        if changed:
            console.print(f"[red]out of date:[/] {', '.join(changed)}; run `headgate schemas`")
            raise typer.Exit(1)
        console.print("schemas are up to date")
    else:
        console.print(f"wrote {escape(str(out))} ({len(changed)} changed)")


keys_app = typer.Typer(help="Approver keys (Ed25519, NATS nkeys format).", no_args_is_help=True)


@keys_app.command("new")
def keys_new(
    name: Annotated[str, typer.Argument(help="Approver name, e.g. alice.")],
    out: Annotated[
        Path | None, typer.Option("--out", help="Seed file to write (default NAME.seed).")
    ] = None,
) -> None:
    """Create an approver key: writes the seed (mode 0600) and prints the public key."""
    path = out or Path(f"{name}.seed")
    if path.exists():
        raise ConfigError(f"{path} exists; refusing to overwrite a key")
    from workflow.signing import ApproverKey

    key = ApproverKey.generate()
    key.write(path)
    console.print(f"wrote {escape(str(path))} (keep it secret; mode 0600)")
    console.print(f"public key: [bold]{key.public_key}[/]")
    console.print("register it in the policy file:\n")
    console.print(
        f'[approvers.{name}]\nkey = "{key.public_key}"\nroles = ["approver"]\nworkspaces = ["*"]',
        highlight=False,
        markup=False,
    )


@keys_app.command("show")
def keys_show(
    seed: Annotated[Path, typer.Argument(metavar="SEED", help="An approver seed file (SU…).")],
) -> None:
    """Print the public key of an existing seed (the `key` to register in the policy)."""
    from workflow.signing import ApproverKey

    sys.stdout.write(ApproverKey.from_file(seed).public_key + "\n")


audit_app = typer.Typer(help="The tamper-evident audit log.", no_args_is_help=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="HEADGATE_DATABASE_URL",
        help="Default: the SQLite database in the data dir.",
    ),
]


def _db_url(database_url: str | None, data_dir: Path) -> str:
    """The database a command reads: --database-url, else the data dir's. A SQLite file that
    does not exist is an error here (opening it would create an empty one)."""
    url = database_url or datadir.sqlite_url(data_dir)
    if url.startswith("sqlite"):
        from sqlalchemy.engine import make_url

        name = make_url(url).database
        path = Path(name) if name and name != ":memory:" else None
        if path is not None and not path.exists():
            where = "check --database-url" if database_url else "pass --data-dir or --database-url"
            raise ConfigError(f"no database at {path}; {where}")
    return url


async def open_store(url: str) -> Store:
    """The Headgate database at `url`, for a command: opened without creating a schema, and a
    database that cannot be opened is a one-line error, not a traceback."""
    from workflow.store.repo import Store

    return await opened(url, lambda: Store.open(url, create=False))


async def opened(url: str, opening: Callable[[], Awaitable[T]]) -> T:
    """`opening()`; a database without Headgate's schema as a `ConfigError` (one that cannot
    be reached or opened is `DatabaseUnavailable` already)."""
    from workflow.store.engine import shown_url
    from workflow.store.migrations import NoSchema

    try:
        return await opening()
    except NoSchema as exc:
        raise ConfigError(
            f"no Headgate database at {shown_url(url)} ({exc}); check --database-url"
        ) from exc


ArchiveOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--archive",
        help="An audit archive or export (JSON Lines) to verify too, against the chain's "
        "anchor; repeat for consecutive files, oldest first.",
    ),
]


@audit_app.command("verify")
def audit_verify(
    archive: ArchiveOpt = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: DbOpt = None,
    json_out: JsonOut = False,
) -> None:
    """Check the hash chain; report the first broken record. Exit 1 when broken.

    After pruning (`[retention] audit`), the stored chain starts at its anchor, which an
    `audit.pruned` record in the chain confirms; with --archive, the archived records are
    checked too: they must chain up to the anchor's record and hash."""
    import asyncio

    from workflow.store.archive import iter_jsonl
    from workflow.store.chain import ChainCheck, seq_label, verify_archive

    # Read as they are checked, a record at a time: archives of any size.
    archived = (row for path in archive or [] for row in iter_jsonl(path))

    async def run() -> tuple[ChainCheck, ChainCheck | None]:
        store = await open_store(_db_url(database_url, data_dir))
        try:
            stored = await store.audit.verify()
            anchors = await store.audit.anchors()
        finally:
            await store.close()
        return stored, verify_archive(archived, anchors) if archive else None

    result, archived_result = asyncio.run(run())
    ok = result.ok and (archived_result is None or archived_result.ok)
    if json_out:
        body: dict[str, Any] = {
            "ok": ok,
            "checked": result.checked,
            "first_bad_seq": result.first_bad_seq,
            "problem": result.problem,
            "anchor_seq": result.anchor_seq,
        }
        if archived_result is not None:
            body["archive"] = {
                "ok": archived_result.ok,
                "checked": archived_result.checked,
                "first_bad_seq": archived_result.first_bad_seq,
                "problem": archived_result.problem,
            }
        print_json(body)
    else:
        if result.ok:
            start = (
                f" from the anchor after record {result.anchor_seq}" if result.anchor_seq else ""
            )
            console.print(f"[green]audit chain intact[/]: {result.checked} records verified{start}")
        else:
            console.print(
                f"[red]audit chain broken[/] at record {seq_label(result.first_bad_seq or 0)}: "
                f"{result.problem} ({result.checked} records before it verified)"
            )
        if archived_result is not None and archived_result.ok:
            console.print(
                f"[green]archive intact[/]: {archived_result.checked} records verified, "
                "up to the anchor"
            )
        elif archived_result is not None:
            bad = seq_label(archived_result.first_bad_seq or 0)
            problem = escape(str(archived_result.problem))
            console.print(f"[red]archive broken[/] at record {bad}: {problem}")
    if not ok:
        raise typer.Exit(1)


@audit_app.command("export")
def audit_export(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The JSON Lines file to write (replaced).")
    ],
    after: Annotated[
        int | None,
        typer.Option("--after", min=0, help="Only records after this sequence number."),
    ] = None,
    through: Annotated[
        int | None,
        typer.Option("--through", min=1, help="Only records up to this sequence number."),
    ] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: DbOpt = None,
) -> None:
    """Write audit records as JSON Lines (their stored fields, so the hashes can be checked
    from the file alone with `audit verify --archive`): an archive before records are pruned,
    or a copy for another system. Records are read and written a batch at a time: memory
    stays the same however long the chain is."""
    import asyncio

    from workflow.store.archive import export_jsonl

    async def run() -> int:
        store = await open_store(_db_url(database_url, data_dir))
        try:
            start = after if after is not None else (await store.audit.anchor())[0]
            batches = store.audit.batches(after_seq=start, through_seq=through)
            return await export_jsonl(out, batches)
        finally:
            await store.close()

    if not out.parent.is_dir():
        raise ConfigError(f"cannot write {out}: the directory {out.parent} does not exist")
    written = asyncio.run(run())
    err_console.print(f"wrote {written} audit records to {escape(str(out))}", highlight=False)


@audit_app.command("tail")
def audit_tail(
    lines: Annotated[int, typer.Option("-n", "--lines", min=1)] = 20,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new records.")
    ] = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: DbOpt = None,
    json_out: JsonOut = False,
) -> None:
    """Show the newest audit records, readably (or as JSON Lines)."""
    import asyncio

    from workflow.store.chain import CHAIN_SPAN, chain_base, chain_of

    async def run() -> None:
        store = await open_store(_db_url(database_url, data_dir))
        try:
            # Each chain followed from its head (PostgreSQL keeps several: `store.audit`).
            last = await store.audit.heads()
            rows = await store.audit.last(lines)  # the newest rows alone, not the table
            for row in rows:
                chain = chain_of(row.seq)
                last[chain] = max(last.get(chain, 0), row.seq)
            _print_audit(rows, json_out)
            while follow:
                await asyncio.sleep(1.0)
                for chain, after in list(last.items()):
                    through = chain_base(chain) + CHAIN_SPAN
                    async for new in store.audit.batches(
                        after_seq=after, through_seq=through, batch=1000
                    ):
                        _print_audit(new, json_out)
                        last[chain] = new[-1].seq
        finally:
            await store.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


def _print_audit(rows: list[Any], json_out: bool) -> None:
    from workflow.masking import mask_text, masked_audit_data
    from workflow.store.chain import seq_label

    for r in rows:
        data = masked_audit_data(json.loads(r.data))
        if json_out:
            sys.stdout.write(json.dumps({**r.model_dump(), "data": data}) + "\n")
            continue
        what = data.get("message") or data.get("reason") or ""
        if r.kind == "proposal":
            v, c = data["verdict"], data["classification"]
            what = (
                f"{data['proposal']['tool']}: {c['risk_class']} ({c['severity']}) → {v['decision']}"
            )
        console.print(
            f"{seq_label(r.seq):>6} {r.at[:19]} {r.kind:<18} {r.actor:<16} "
            f"{r.proposal_id or r.request_id or '':<28} {mask_text(what)}",
            highlight=False,
            markup=False,
        )
    sys.stdout.flush()
