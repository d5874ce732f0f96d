"""The registry of per-command danger rules: command name -> rule."""

from __future__ import annotations

from workflow.classify.findings import finding
from workflow.classify.rules import (
    HIGH,
    NONE,
    N,
    Result,
    Rule,
    X,
    _dd,
    _positional,
    _rm,
    _simple,
    _sql_client,
    _truncation,
)
from workflow.classify.rules_system import SYSTEM_RULES
from workflow.classify.shellstate import ShellState, Word
from workflow.classify.taxonomy import Category, RiskClass, Severity


def _tee(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    return ("write", frozenset(), _positional(args))


RULES: dict[str, Rule] = {
    **SYSTEM_RULES,
    "rm": _rm,
    "unlink": _simple(
        "shell.unlink",
        "deletes a file",
        RiskClass.DESTRUCTIVE,
        Severity.MEDIUM,
        Category.DESTRUCTIVE,
    ),
    "shred": _truncation,
    "truncate": _truncation,
    "srm": _truncation,
    "dd": _dd,
    "tee": _tee,
    **{
        n: _sql_client
        for n in (
            "psql",
            "mysql",
            "mariadb",
            "sqlite3",
            "duckdb",
            "clickhouse-client",
            "cockroach",
            "mongosh",
            "mongo",
            "redis-cli",
            "sqlcmd",
        )
    },
}


def apply(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    """Run the danger rule for `name`, if there is one."""
    rule = RULES.get(name)
    if rule is None and name.startswith("mkfs"):
        rule = RULES["mkfs"]
    if rule is None:
        return NONE
    return rule(name, args, st, stdin_text)


def python_module(module: str, args: list[Word], st: ShellState) -> frozenset[str]:
    """`python -m <module>`: a few modules are well known, the rest is exec."""
    if module in ("pip", "pip3", "uv", "poetry", "pipx"):
        return apply("pip", args, st, None)[1]
    if module in ("http.server", "SimpleHTTPServer", "smtpd", "ftplib"):
        st.add(
            finding(
                "shell.python_server",
                f"`python -m {module}` serves or sends files over the network (network, high).",
                X,
                HIGH,
                N,
            )
        )
    return frozenset()
