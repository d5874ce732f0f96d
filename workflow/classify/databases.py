"""Database clients: which SQL only reads (`psql -c 'SELECT …'`, `sqlite3 db '.tables'`).

A client invocation is a read of its database when every statement it is given is a query
that cannot change anything: it starts with SELECT/WITH/SHOW/DESCRIBE/EXPLAIN (not EXPLAIN
ANALYZE, which runs the statement), names no writing keyword outside string literals (INSERT,
UPDATE, DELETE, CREATE, COPY, INTO, …), calls only functions known to be pure (not `nextval`,
`pg_read_file`, `readfile`, `writefile`, `load_extension`, `edit`, `lo_export`, …), and holds no
backslash command outside a string (psql and mysql run `\\!`, `\\o`, `\\copy`, `\\g FILE`
wherever they appear). psql meta-commands that only describe (`\\dt`, `\\d users`, `\\l`) and
sqlite3 dot-commands that only describe (`.tables`, `.schema`) are reads too. Options that run
a file (`psql -f`, `sqlite3 -init`), write one (`psql -o`, `-L`, `mysql --tee`) or change the
pager keep the invocation out. A read of a database on another host is egress.
"""

from __future__ import annotations

import re

from workflow.classify.hosts import host_findings
from workflow.classify.shellstate import ShellState, Word

_STRINGS = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\$(\w*)\$.*?\$\1\$|--[^\n]*|/\*.*?\*/|#[^\n]*",
    re.DOTALL,
)
_START = re.compile(r"(?is)^\s*\(*\s*(select|with|show|describe|desc|explain|values|table)\b")
_WRITING = re.compile(
    r"(?i)\b(insert|update|delete|merge|upsert|create|alter|drop|truncate|grant|revoke|copy|"
    r"call|do|execute|exec|prepare|lock|vacuum|analyze|analyse|reindex|cluster|refresh|set|"
    r"reset|load|attach|detach|into|outfile|dumpfile|begin|commit|rollback|savepoint|listen|"
    r"notify|unlisten|comment|security|import|install|handler|for\s+update|for\s+share|"
    r"shutdown|kill|flush|purge|rename|discard|checkpoint)\b"
)
_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")
#: Functions that only compute (SQL standard, PostgreSQL, MySQL, SQLite).
_PURE = frozenset(
    """count sum avg min max abs round floor ceil ceiling trunc mod power sqrt exp ln log sign
    lower upper length char_length character_length octet_length bit_length substr substring
    trim ltrim rtrim btrim coalesce nullif ifnull iif if greatest least concat concat_ws now
    current_date current_time current_timestamp localtime localtimestamp date time datetime
    julianday unixepoch strftime date_trunc date_part extract to_char to_date to_timestamp
    to_number age version typeof cast convert json_extract json_object json_array json_agg
    jsonb_agg json_build_object jsonb_build_object json_each json_tree jsonb_pretty to_json
    to_jsonb row_to_json array_agg string_agg group_concat row_number rank dense_rank
    percent_rank cume_dist lag lead first_value last_value nth_value ntile percentile_cont
    percentile_disc stddev stddev_pop stddev_samp variance var_pop var_samp bool_and bool_or
    every random format printf quote hex unhex instr position strpos split_part
    regexp_replace regexp_matches regexp_match regexp_like regexp_substr left right lpad rpad
    reverse repeat replace translate total likely unlikely unicode char chr ascii md5 sha1
    sha2 pg_size_pretty pg_total_relation_size pg_relation_size pg_table_size
    pg_indexes_size pg_database_size current_user session_user current_database
    current_schema current_schemas has_table_privilege has_schema_privilege
    has_database_privilege to_regclass format_type obj_description col_description
    pg_get_viewdef pg_get_indexdef pg_get_constraintdef pg_typeof generate_series unnest
    array_length cardinality array_to_string string_to_array database user schema
    date_format from_unixtime unix_timestamp datediff date_add date_sub timestampdiff
    sqlite_version last_insert_rowid changes total_changes zeroblob exists in values over
    filter any all some coalesce nullif case when not and or on using as from join where
    having window partition within int integer text varchar numeric decimal real float
    double interval timestamp bigint smallint boolean count_big row array""".split()
)
#: psql meta-commands that only describe, with their arguments.
_PSQL_META = re.compile(
    r"^\s*\\(d[A-Za-z]{0,3}[+S]*|l\+?|conninfo|encoding|echo)(\s+[\w.*\"$ ]*)?\s*$"
)
#: sqlite3 dot-commands that only describe or set how the output looks.
_SQLITE_DOT = re.compile(
    r"^\s*\.(tables|table|schema|fullschema|indexes|indices|databases|dbinfo|show|help|"
    r"headers|header|mode|width|nullvalue|separator|timer|eqp|changes|stats|lint)\b[^\n]*$"
)


def sql_reads_only(sql: str, dialect: str) -> bool:
    """True when every statement of `sql` only reads (see the module docstring)."""
    if dialect == "psql" and _PSQL_META.match(sql):
        return True
    lines = sql.split("\n")
    if dialect == "sqlite3" and all(_SQLITE_DOT.match(line) for line in lines if line.strip()):
        return bool(sql.strip())
    bare = _STRINGS.sub(" '' ", sql)
    if "\\" in bare or (dialect == "sqlite3" and re.search(r"(?m)^\s*\.", bare)):
        return False
    statements = [s for s in bare.split(";") if s.strip()]
    if not statements:
        return False
    for stmt in statements:
        if not _START.match(stmt) or _WRITING.search(stmt):
            return False
        if any(name.lower().rsplit(".", 1)[-1] not in _PURE for name in _CALL.findall(stmt)):
            return False
    return True


#: Options of each client that run a file, write one or change what runs.
_UNSAFE = {
    "psql": ("-f", "--file", "-o", "--output", "-L", "--log-file"),
    "mysql": (
        "--tee",
        "--pager",
        "--defaults-file",
        "--defaults-extra-file",
        "--init-command",
        "--plugin-dir",
        "--load-data-local-dir",
        "--local-infile",
    ),
    "mariadb": (
        "--tee",
        "--pager",
        "--defaults-file",
        "--defaults-extra-file",
        "--init-command",
        "--plugin-dir",
        "--load-data-local-dir",
        "--local-infile",
    ),
    "sqlite3": ("-init", "--init", "-A", "-archive", "--archive", "-cmd", "--cmd"),
    "duckdb": ("-init", "--init", "-cmd", "--cmd"),
}
_HOST_OPTS = ("-h", "--host")
_LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
_URL_HOST = re.compile(r"^(?:postgres(?:ql)?|mysql|mariadb)://(?:[^@/]*@)?([^/:?]*)")
_CONNINFO_HOST = re.compile(r"\bhost\s*=\s*'?([^\s']+)")


def remote_host(name: str, args: list[Word]) -> str | None:
    """The database host a client connects to when it is not this machine."""
    vals = [a.text for a in args]
    hosts: list[str] = []
    for i, v in enumerate(vals):
        if v in _HOST_OPTS and i + 1 < len(vals):
            hosts.append(vals[i + 1])
        elif v.startswith("--host="):
            hosts.append(v.split("=", 1)[1])
        elif name == "mysql" and v.startswith("-h") and len(v) > 2:
            hosts.append(v[2:])
        m = _URL_HOST.match(v) or _CONNINFO_HOST.search(v) if "=" in v or "://" in v else None
        if m:
            hosts.append(m.group(1))
    for h in hosts:
        if h not in _LOCAL_HOSTS and not h.startswith("/"):
            return h
    return None


def client_reads_only(name: str, args: list[Word], texts: list[str], st: ShellState) -> bool:
    """True when a client run only reads its database; adds an egress finding for a remote
    one."""
    dialect = "sqlite3" if name in ("sqlite3", "duckdb") else "psql" if name == "psql" else name
    if name not in _UNSAFE or not texts or any(a.value is None for a in args):
        return False
    unsafe = _UNSAFE[name]
    letters = "".join(u[1] for u in unsafe if len(u) == 2)
    for a in args:
        t = a.text
        if t.split("=", 1)[0] in unsafe or any(len(u) == 2 and t.startswith(u) for u in unsafe):
            return False
        if letters and re.fullmatch(r"-[A-Za-z]+", t) and set(t[1:]) & set(letters):
            return False
    if not all(sql_reads_only(t, dialect) for t in texts):
        return False
    host = remote_host(name, args)
    if host is not None:
        st.add(*host_findings(host, st.trusted, f"`{name}`"))
    return True
