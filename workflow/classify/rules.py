"""Danger rules for single commands: destructive, privileged, network, secret access, SQL.

Each rule adds findings to the state and returns `(base, traits, path_args)`: `base` is
"read", "write" or "exec" when the rule knows the command's base class (None: let the
read-only list decide), `traits` mark downloads and decoders for the pipeline rules, and
`path_args` (None: every argument) are the arguments checked against protected paths.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from workflow.classify.databases import client_reads_only
from workflow.classify.findings import Finding, finding
from workflow.classify.grammar import FIND_WRITES, find_primaries
from workflow.classify.shellstate import DECODE, FETCH, ShellState, Word, shown
from workflow.classify.targets import Access, check_path, normalise
from workflow.classify.taxonomy import Category, RiskClass, Severity

Wrapper = Callable[[str, list[Word], ShellState, str | None], frozenset[str]]
Result = tuple[str | None, frozenset[str], list[Word] | None]
Rule = Callable[[str, list[Word], ShellState, str | None], Result]

D, P, N, S = Category.DESTRUCTIVE, Category.PRIVILEGED, Category.NETWORK, Category.SECRET_ACCESS
X, DE, EG = RiskClass.EXEC, RiskClass.DESTRUCTIVE, RiskClass.EGRESS
MED, HIGH, CRIT = Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL
NONE: Result = (None, frozenset(), None)
EXEC: Result = ("exec", frozenset(), None)


def _vals(args: list[Word]) -> list[str]:
    return [a.text for a in args]


def _has_flag(args: list[Word], *flags: str, short: str = "") -> bool:
    for v in _vals(args):
        if v in flags or any(v.startswith(f + "=") for f in flags if f.startswith("--")):
            return True
        if short and v.startswith("-") and not v.startswith("--") and set(v[1:]) & set(short):
            return True
    return False


def _positional(args: list[Word]) -> list[Word]:
    return [a for a in args if not a.text.startswith("-")]


# --------------------------------------------------------------------------- shared findings


def runs_download(what: str) -> Finding:
    return finding(
        "shell.download_execute",
        f"`{what}` executes code that was just downloaded or decoded (critical).",
        X,
        CRIT,
        N,
    )


def runs_unknown_code(label: str, traits: frozenset[str]) -> Finding:
    if traits & {FETCH, DECODE}:
        return runs_download(label.strip("`"))
    return finding(
        "shell.dynamic_code",
        f"{label} is only known at run time, so what it runs cannot be analysed; it fails "
        "closed (exec, high).",
        X,
        HIGH,
        fail_closed=True,
    )


def inline_code(name: str, code: Word) -> Finding:
    text = code.text
    cats: list[Category] = []
    if re.search(r"urllib|requests|http\.client|socket|fetch\(|LWP|Net::|open-uri", text):
        cats.append(N)
    if re.search(r"rmtree|os\.remove|unlink|rm_rf|rmdir|fs\.rm", text):
        return finding(
            "shell.inline_code_delete",
            f"`{name}` runs inline code that deletes files (destructive, high).",
            DE,
            HIGH,
            D,
            *cats,
        )
    return finding(
        "shell.inline_code",
        f"`{name}` runs inline code, which is not analysed (exec, high).",
        X,
        HIGH,
        *cats,
    )


def sensitive_variable(var: str) -> Finding:
    return finding(
        "shell.sensitive_variable",
        f"The command sets `{var}`, which changes which programs run, so the analysis cannot "
        "vouch for it (exec, high).",
        X,
        HIGH,
        fail_closed=True,
    )


def env_dump(cmd: str) -> Finding:
    return finding(
        "shell.env_dump",
        f"`{cmd}` prints the environment, which usually holds API keys and tokens "
        "(secret_access, high).",
        EG,
        HIGH,
        S,
    )


def privileged_wrapper(name: str, args: list[Word]) -> Finding:
    root_shell = not _positional(args) or _has_flag(args, "-i", "-s", "--login", "--shell")
    sev = CRIT if root_shell and name in ("sudo", "doas", "su") else HIGH
    return finding(
        "shell.privileged_wrapper",
        f"`{name} {shown(args)}`".replace(" `", "`") + " runs with another user's "
        f"privileges (privileged, {sev}).",
        X,
        sev,
        P,
    )


def find_rules(args: list[Word], st: ShellState) -> None:
    """find's primaries, parsed with their values: `-delete` deletes, `-fprint`/`-fprintf`/
    `-fls` write the file they name (through the path rules), `-files0-from` reads one."""
    for primary, values in find_primaries(args):
        if primary == "-delete":
            st.add(
                finding(
                    "shell.find_delete",
                    f"`find {shown(args)}` deletes every file it matches (destructive, high).",
                    DE,
                    HIGH,
                    D,
                )
            )
        elif primary in FIND_WRITES and values:
            st.add(
                finding(
                    "options.writes_file",
                    f"`find {shown(args)}`: `{primary} {values[0].text}` makes `find` write "
                    "files (write_local, medium).",
                    RiskClass.WRITE_LOCAL,
                    MED,
                ),
                *check_path(values[0].approx, st.cwd, st.rules, Access.WRITE, "`find`"),
            )
        elif primary == "-files0-from" and values:
            st.add(*check_path(values[0].approx, st.cwd, st.rules, Access.READ, "`find`"))


# --------------------------------------------------------------------------- destructive

#: Directories whose recursive deletion or opening-up is system-wide (critical).
SYSTEM_DIRS = frozenset(
    {
        "/",
        "/etc",
        "/usr",
        "/var",
        "/bin",
        "/sbin",
        "/lib",
        "/boot",
        "/home",
        "/opt",
        "/System",
        "/Library",
        "/Users",
        "/root",
        "/dev",
    }
)


def _rm(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    recursive = _has_flag(args, "--recursive", short="rR")
    targets = [normalise(a.approx, st.cwd, st.rules.home) for a in _positional(args)]
    wide = any(t in SYSTEM_DIRS or t == st.rules.home or "*" in t for t in targets) or (
        _has_flag(args, "--no-preserve-root")
    )
    sev = CRIT if wide and recursive else HIGH if recursive else MED
    what = "recursively deletes" if recursive else "deletes"
    message = f"`{name} {shown(args)}` {what} files (destructive, {sev})."
    if recursive:
        st.add(finding("shell.rm_recursive", message, DE, sev, D))
    else:
        st.add(finding("shell.rm", message, DE, sev, D))
    return EXEC


def _simple(rule: str, text: str, risk: RiskClass, sev: Severity, *cats: Category) -> Rule:
    def apply(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
        label = ", ".join([*(c.value for c in cats), sev.value])
        st.add(
            finding(rule, f"`{shown([Word.of(name), *args])}` {text} ({label}).", risk, sev, *cats)
        )
        return EXEC

    return apply


def _dd(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    out = next((v[3:] for v in _vals(args) if v.startswith("of=")), None)
    if out is None:
        return EXEC
    sev = CRIT if out.startswith("/dev/") and out not in ("/dev/null", "/dev/stdout") else HIGH
    st.add(
        finding(
            "shell.dd", f"`dd` overwrites `{out}` block by block (destructive, {sev}).", DE, sev, D
        )
    )
    return ("exec", frozenset(), [Word.of(out)])


def _truncation(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    st.add(
        finding(
            "shell.truncation",
            f"`{name} {shown(args)}` destroys file contents (destructive, high).",
            DE,
            HIGH,
            D,
        )
    )
    return EXEC


# --------------------------------------------------------------------------- SQL

_SQL_CRIT = re.compile(
    r"(?i)\b(DROP\s+(TABLE|DATABASE|SCHEMA|INDEX|VIEW|USER|ROLE|OWNED)|"
    r"TRUNCATE)\b"
)
_SQL_DELETE = re.compile(r"(?i)\bDELETE\s+FROM\b")
_SQL_UPDATE = re.compile(r"(?i)\bUPDATE\s+\S+\s+SET\b")
_SQL_WHERE = re.compile(r"(?i)\bWHERE\b")
_SQL_PRIV = re.compile(r"(?i)\b(GRANT|REVOKE|ALTER\s+USER|CREATE\s+USER|ALTER\s+ROLE)\b")
_SQL_FLAGS = ("-c", "--command", "-e", "--execute", "-q", "--query", "--eval")


def sql_findings(client: str, sql: str) -> list[Finding]:
    out: list[Finding] = []
    short = sql if len(sql) <= 60 else sql[:59] + "…"
    if _SQL_CRIT.search(sql):
        out.append(
            finding(
                "shell.sql_drop",
                f"`{client}` runs `{short}`, which drops or "
                "empties whole tables (destructive, critical).",
                DE,
                CRIT,
                D,
            )
        )
    for stmt in sql.split(";"):
        if _SQL_WHERE.search(stmt):
            continue
        if _SQL_DELETE.search(stmt):
            out.append(
                finding(
                    "shell.sql_delete_all",
                    f"`{client}` runs a DELETE without WHERE, which changes every row "
                    "(destructive, critical).",
                    DE,
                    CRIT,
                    D,
                )
            )
        if _SQL_UPDATE.search(stmt):
            out.append(
                finding(
                    "shell.sql_update_all",
                    f"`{client}` runs an UPDATE without WHERE, which changes every row "
                    "(destructive, critical).",
                    DE,
                    CRIT,
                    D,
                )
            )
    if _SQL_PRIV.search(sql):
        out.append(
            finding(
                "shell.sql_privileges",
                f"`{client}` changes database users or grants (privileged, high).",
                X,
                HIGH,
                P,
            )
        )
    return out


def _sql_client(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    texts = [stdin_text] if stdin_text else []
    vals = _vals(args)
    for i, v in enumerate(vals):
        if v in _SQL_FLAGS and i + 1 < len(vals):
            texts.append(vals[i + 1])
        elif v.startswith(tuple(f + "=" for f in _SQL_FLAGS if f.startswith("--"))):
            texts.append(v.split("=", 1)[1])
        elif v.startswith(("-c", "-e")) and len(v) > 2 and " " in v:
            texts.append(v[2:])
    if name in ("sqlite3", "duckdb"):
        texts.extend(w.text for w in _positional(args)[1:])
    elif name == "redis-cli":
        texts.append(" ".join(w.text for w in _positional(args)))
    if client_reads_only(name, args, [t for t in texts if t], st):
        return ("read", frozenset(), _positional(args)[:1] if name in ("sqlite3", "duckdb") else [])
    for text in texts:
        st.add(*sql_findings(name, text))
        if name == "redis-cli" and re.search(r"(?i)\bFLUSH(ALL|DB)\b", text):
            st.add(
                finding(
                    "shell.redis_flush",
                    "`redis-cli` flushes the whole database (destructive, critical).",
                    DE,
                    CRIT,
                    D,
                )
            )
        if re.search(r"dropDatabase|\.drop\(\)|deleteMany\(\{\}\)", text):
            st.add(
                finding(
                    "shell.mongo_drop",
                    f"`{name}` drops a collection or database (destructive, critical).",
                    DE,
                    CRIT,
                    D,
                )
            )
    return ("exec", frozenset(), _positional(args)[:1] if name in ("sqlite3", "duckdb") else [])
