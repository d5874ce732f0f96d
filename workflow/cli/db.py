"""`headgate db`: the database's size, and giving pruned space back (SQLite)."""

from __future__ import annotations

from typing import Annotated

import typer

from workflow.cli.common import DEFAULT_DATA_DIR, DataDir, JsonOut, console, print_json
from workflow.cli.offline import DbOpt, _db_url, open_store

db_app = typer.Typer(help="The service's database.", no_args_is_help=True)


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


@db_app.command("vacuum")
def db_vacuum(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report the database's size and free space.")
    ] = False,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    database_url: DbOpt = None,
    json_out: JsonOut = False,
) -> None:
    """Give the space of pruned rows back to the file system (SQLite).

    SQLite reuses the pages the retention pruner frees, so with `[retention]` the file stops
    growing, but it never shrinks by itself. This rebuilds it without its free pages. A
    running service's writes (approvals too) wait until it is done, so run it at a quiet
    moment. On PostgreSQL autovacuum makes deleted rows' space reusable and nothing is done
    here (`VACUUM FULL` gives it back, locking each table while it is rewritten); it says
    whether autovacuum is off on the server or on Headgate's tables, and what to do."""
    import asyncio

    from workflow.store.maintenance import (
        Autovacuum,
        SpaceReport,
        Vacuumed,
        autovacuum,
        space,
        vacuum,
    )

    async def run() -> SpaceReport | Vacuumed | Autovacuum | None:
        store = await open_store(_db_url(database_url, data_dir))
        try:
            if store.db.dialect == "postgresql":
                return await autovacuum(store.db)
            return await (space(store.db) if dry_run else vacuum(store.db))
        finally:
            await store.close()

    got = asyncio.run(run())
    if isinstance(got, Autovacuum):
        problem = got.problem()
        message = problem or (
            "PostgreSQL: autovacuum makes the space of pruned rows reusable; nothing to do "
            "here (VACUUM FULL gives it back to the file system, locking each table while it "
            "is rewritten)."
        )
        if json_out:
            print_json({
                "backend": "postgresql", "vacuumed": False, "message": message,
                "autovacuum": {
                    "ok": got.ok, "server": got.server_on, "track_counts": got.track_counts,
                    "disabled_tables": list(got.disabled_tables),
                },
            })  # fmt: skip
        else:
            console.print(f"[yellow]warning[/]: {message}" if problem else message,
                          highlight=False)  # fmt: skip
        return
    if got is None:
        raise typer.BadParameter("an in-memory database has nothing to vacuum")
    if isinstance(got, Vacuumed):
        before, after = got.before, got.after
    else:
        before = after = got
    if json_out:
        print_json(
            {
                "backend": "sqlite",
                "path": str(before.path),
                "vacuumed": not dry_run,
                "size_bytes_before": before.size_bytes,
                "free_bytes_before": before.free_bytes,
                "file_bytes_before": before.file_bytes,
                "size_bytes_after": after.size_bytes,
                "free_bytes_after": after.free_bytes,
                "file_bytes_after": after.file_bytes,
            }
        )
    elif dry_run:
        console.print(
            f"{before.path}: {_mb(before.size_bytes)}, of which {_mb(before.free_bytes)} free "
            f"pages (reused by new rows; `headgate db vacuum` gives them back); "
            f"{_mb(before.file_bytes)} on disk with the write-ahead log",
            highlight=False,
        )
    else:
        console.print(
            f"{before.path}: {_mb(before.file_bytes)} → {_mb(after.file_bytes)} on disk "
            f"({_mb(before.free_bytes)} of free pages given back)",
            highlight=False,
        )
