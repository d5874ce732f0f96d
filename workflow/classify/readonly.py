"""The reviewed list of read-only commands (DESIGN §4 layer 6).

A command is a low read only when its name is here *and* its checker accepts the arguments:
`sed` without `-i`, `find` without `-exec`/`-delete`, `git` listing subcommands, `sort` without
`-o`... The list follows the spirit of the known-safe command lists of Codex and Claude Code:
commands that print information and change nothing. Anything not accepted here is exec unless an
operator template says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from workflow.classify.shellstate import Word

Checker = Callable[[list[Word]], bool]


def _always(_args: list[Word]) -> bool:
    return True


def _values(args: list[Word]) -> list[str]:
    return [a.text for a in args]


def _none_of(*flags: str) -> Checker:
    def check(args: list[Word]) -> bool:
        for v in _values(args):
            if v in flags or any(v.startswith(f + "=") for f in flags if f.startswith("--")):
                return False
            if v.startswith("-") and not v.startswith("--"):
                short = [f[1] for f in flags if len(f) == 2 and f[0] == "-"]
                if any(c in v[1:] for c in short):
                    return False
        return True

    return check


def _positional(args: list[Word]) -> list[str]:
    return [v for v in _values(args) if not v.startswith("-")]


def _at_most_positional(n: int) -> Checker:
    return lambda args: len(_positional(args)) <= n


def _date(args: list[Word]) -> bool:
    return _none_of("-s", "--set")(args) and all(p.startswith("+") for p in _positional(args))


_SED_WRITE = re.compile(r"(^|[;}\s/0-9$])[wWe](\s|$|;)|/[gpiImM0-9]*[wWe]")


def _sed(args: list[Word]) -> bool:
    vals = _values(args)
    if any(
        v.startswith(("-i", "--in-place"))
        or (v.startswith("-") and "i" in v[1:] and not v.startswith("--"))
        for v in vals
    ):
        return False
    if any(v.startswith("-") and "f" in v[1:] and not v.startswith("--") for v in vals):
        return False  # a script file we cannot see
    scripts = [v for v in vals if not v.startswith("-")][:1]
    for i, v in enumerate(vals):
        if v in ("-e", "--expression") and i + 1 < len(vals):
            scripts.append(vals[i + 1])
    return not any(_SED_WRITE.search(s) for s in scripts) and all(a.value is not None for a in args)


_AWK_UNSAFE = re.compile(r"system|getline|\||>|print[f]?\s*>|fflush|close|@load|ENVIRON")


def _awk(args: list[Word]) -> bool:
    vals = _values(args)
    if any(v.startswith("-f") or v == "--file" or v.startswith("-i") for v in vals):
        return False
    program = next((v for v in vals if not v.startswith("-")), "")
    return all(a.value is not None for a in args) and not _AWK_UNSAFE.search(program)


_FIND_UNSAFE = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


def _find(args: list[Word]) -> bool:
    return not any(v in _FIND_UNSAFE for v in _values(args))


def _rg(args: list[Word]) -> bool:
    return not any(v.startswith(("--pre", "--search-zip", "-z")) for v in _values(args))


def _xxd(args: list[Word]) -> bool:
    return _none_of("-r", "-revert")(args) and len(_positional(args)) <= 1


def _base64(args: list[Word]) -> bool:
    return _none_of("-o", "--output")(args) and len(_positional(args)) <= 1


def _uniq(args: list[Word]) -> bool:
    return len(_positional(args)) <= 1


def _command(args: list[Word]) -> bool:
    vals = _values(args)
    return bool(vals) and vals[0] in ("-v", "-V")


READ_ONLY: dict[str, Checker] = {
    **{
        name: _always
        for name in (
            "ls",
            "dir",
            "vdir",
            "cat",
            "head",
            "tail",
            "wc",
            "grep",
            "egrep",
            "fgrep",
            "ag",
            "ack",
            "pwd",
            "echo",
            "printf",
            "true",
            "false",
            ":",
            "whoami",
            "id",
            "groups",
            "uname",
            "stat",
            "file",
            "du",
            "df",
            "tree",
            "which",
            "type",
            "whereis",
            "basename",
            "dirname",
            "realpath",
            "readlink",
            "cut",
            "tr",
            "diff",
            "cmp",
            "comm",
            "jq",
            "nl",
            "od",
            "hexdump",
            "strings",
            "md5sum",
            "sha1sum",
            "sha224sum",
            "sha256sum",
            "sha384sum",
            "sha512sum",
            "shasum",
            "cksum",
            "b2sum",
            "md5",
            "column",
            "seq",
            "test",
            "[",
            "[[",
            "tac",
            "rev",
            "fold",
            "fmt",
            "paste",
            "join",
            "expand",
            "unexpand",
            "ps",
            "free",
            "uptime",
            "nproc",
            "locale",
            "less",
            "more",
            "lsblk",
            "lscpu",
            "arch",
            "tty",
            "sleep",
            "wait",
            "cd",
            "pushd",
            "popd",
            "dirs",
            "zcat",
            "zgrep",
            "bzcat",
            "xzcat",
            "look",
            "getconf",
            "lsof",
            "pgrep",
            "fd",
            "fdfind",
            "bat",
            "batcat",
            "exa",
            "eza",
            "cal",
            "numfmt",
            "tsort",
            "pr",
            "iconv",
            "shuf",
            "yes",
            "nl",
            "expr",
            "w",
            "who",
            "users",
            "last",
            "logname",
            "vmstat",
            "iostat",
            "tput",
            "clear",
            "help",
            "hash",
            "tldr",
            "mktemp",
        )
    },
    "date": _date,
    "hostname": _at_most_positional(0),
    "sort": _none_of("-o", "--output"),
    "uniq": _uniq,
    "sed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "nawk": _awk,
    "find": _find,
    "rg": _rg,
    "xxd": _xxd,
    "base64": _base64,
    "command": _command,
    "yq": _none_of("-i", "--inplace"),
    "man": _none_of("-P", "--pager", "-H", "--html"),
}

# --------------------------------------------------------------------------- git

_GIT_READ = frozenset(
    {
        "status",
        "log",
        "show",
        "blame",
        "annotate",
        "shortlog",
        "describe",
        "rev-parse",
        "rev-list",
        "ls-files",
        "ls-tree",
        "cat-file",
        "grep",
        "whatchanged",
        "show-ref",
        "name-rev",
        "merge-base",
        "count-objects",
        "version",
        "help",
        "cherry",
        "for-each-ref",
        "check-ignore",
        "check-attr",
        "show-branch",
        "range-diff",
        "verify-commit",
        "verify-tag",
    }
)
_GIT_DIFF_UNSAFE = ("--output", "--ext-diff", "--textconv")
_BRANCH_WRITE = frozenset(
    {
        "-d",
        "-D",
        "-m",
        "-M",
        "-c",
        "-C",
        "--delete",
        "--move",
        "--copy",
        "--set-upstream-to",
        "-u",
        "--unset-upstream",
        "--edit-description",
        "-f",
        "--force",
        "--track",
        "-t",
    }
)
_BRANCH_LIST = frozenset(
    {
        "--list",
        "-l",
        "-a",
        "--all",
        "-r",
        "--remotes",
        "--contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "--show-current",
    }
)


def _git_listing(sub: str, rest: list[str]) -> bool:
    flags = [v for v in rest if v.startswith("-")]
    positional = [v for v in rest if not v.startswith("-")]
    if sub == "branch":
        return not any(f.split("=")[0] in _BRANCH_WRITE for f in flags) and (
            not positional or any(f.split("=")[0] in _BRANCH_LIST for f in flags)
        )
    if sub == "tag":
        return not positional or any(f in ("-l", "--list", "--contains") for f in flags)
    if sub == "remote":
        return not positional or positional[0] in ("show", "get-url")
    if sub in ("stash", "worktree", "notes", "submodule"):
        return bool(positional) and positional[0] in ("list", "show", "status")
    if sub == "reflog":
        return not positional or positional[0] == "show"
    if sub == "config":
        return any(f in ("--get", "--get-all", "--get-regexp", "--list", "-l") for f in flags)
    return False


def git_is_read(sub: str, rest: list[Word]) -> bool:
    """True when `git <sub> <rest>` only reads the repository."""
    vals = _values(rest)
    if sub in ("diff", "log", "show") and any(v.startswith(_GIT_DIFF_UNSAFE) for v in vals):
        return False
    if sub in _GIT_READ or sub == "diff":
        return not any(v.startswith("--output") for v in vals)
    return _git_listing(sub, vals)
