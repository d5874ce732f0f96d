"""The reviewed list of read-only commands, each with its option grammar (DESIGN §4 layer 6).

A command is a low read only when its name is here *and* its words, parsed with its grammar,
carry no option that runs a program, writes, connects or changes the system, and its program
text (awk, sed, jq) does none of these either. The list follows the spirit of the known-safe
command lists of Codex and Claude Code: commands that print information and change nothing.
The options were taken from each program's manual (GNU coreutils, grep, sed, gawk, findutils,
less, man-db, ripgrep, fd, bat, jq, yq, procps, util-linux, xxd); an option not listed is taken
as a harmless flag unless the grammar is strict. Anything not accepted here is exec unless an
operator template says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from workflow.classify.grammar import (
    FIND_ACTS,
    FIND_WRITES,
    Effect,
    Grammar,
    find_primaries,
    grammar,
    parse,
)
from workflow.classify.readers import Reader, decoding
from workflow.classify.scripts import awk_program, jq_program, ps_options, sed_program, yq_program
from workflow.classify.shellstate import Word

E, W, WS, R = Effect.EXEC, Effect.WRITE, Effect.WRITES, Effect.READ
C, CH, D, ENV = Effect.CONNECT, Effect.CHANGE, Effect.DESTROY, Effect.ENV

Checker = Callable[[list[Word]], bool]


def _g(
    values: str = "",
    long_values: Iterable[str] = (),
    effects: dict[str, Effect] | None = None,
    **kw: object,
) -> Grammar:
    return grammar(values=values, long_values=long_values, effects=effects, **kw)  # type: ignore[arg-type]


_PLAIN = _g()


def _reader(operands: str, values: str = "", long_values: Iterable[str] = ()) -> Reader:
    return Reader(_g(values, long_values), operands)


# --------------------------------------------------------------------------- grammars

_GREP = _g(
    "efmABCdD",
    (
        "--regexp",
        "--file",
        "--max-count",
        "--after-context",
        "--before-context",
        "--context",
        "--label",
        "--include",
        "--exclude",
        "--exclude-from",
        "--exclude-dir",
        "--binary-files",
        "--devices",
        "--directories",
        "--group-separator",
    ),
    {"-f": R, "--file": R, "--exclude-from": R},
    long_optional=("--color", "--colour"),
)
_GREP_READER = Reader(
    _GREP, "paths", text=1, text_options=frozenset({"-e", "--regexp", "-f", "--file"})
)

_RG = _g(
    "efgtTmABCjMdEr",
    (
        "--regexp",
        "--file",
        "--glob",
        "--iglob",
        "--type",
        "--type-not",
        "--type-add",
        "--type-clear",
        "--max-count",
        "--after-context",
        "--before-context",
        "--context",
        "--threads",
        "--max-columns",
        "--max-depth",
        "--maxdepth",
        "--encoding",
        "--replace",
        "--color",
        "--colors",
        "--context-separator",
        "--field-context-separator",
        "--field-match-separator",
        "--path-separator",
        "--sort",
        "--sortr",
        "--pre",
        "--pre-glob",
        "--ignore-file",
        "--dfa-size-limit",
        "--regex-size-limit",
        "--max-filesize",
        "--engine",
        "--hostname-bin",
        "--hyperlink-format",
        "--generate",
    ),
    {
        "--pre": E,
        "--hostname-bin": E,
        "-z": E,
        "--search-zip": E,
        "-f": R,
        "--file": R,
        "--ignore-file": R,
    },
    abbreviate=False,
)
_RG_READER = Reader(
    _RG,
    "paths",
    text=1,
    text_options=frozenset({"-e", "--regexp", "-f", "--file"}),
    no_text=frozenset({"--files", "--type-list", "--generate"}),
)

_AG = _g(
    "ABCGgmpW",
    (
        "--after",
        "--before",
        "--context",
        "--file-search-regex",
        "--max-count",
        "--path-to-ignore",
        "--pager",
        "--ignore",
        "--ignore-dir",
        "--depth",
        "--width",
        "--color-line-number",
        "--color-match",
        "--color-path",
    ),
    {"--pager": E, "-p": R, "--path-to-ignore": R},
    abbreviate=False,
)
_ACK = _g(
    "ABCgmo",
    (
        "--after-context",
        "--before-context",
        "--context",
        "--max-count",
        "--pager",
        "--ackrc",
        "--type-set",
        "--type-add",
        "--type-del",
        "--ignore-dir",
        "--ignore-file",
        "--match",
        "--output",
        "--color-filename",
        "--color-match",
        "--color-lineno",
        "--files-from",
    ),
    {"--pager": E, "--output": E, "--ackrc": R, "--files-from": R},
)
_FD = _g(
    "etEdSojcxX",
    (
        "--extension",
        "--type",
        "--exclude",
        "--max-depth",
        "--min-depth",
        "--exact-depth",
        "--size",
        "--owner",
        "--threads",
        "--color",
        "--changed-within",
        "--changed-before",
        "--change-newer-than",
        "--change-older-than",
        "--base-directory",
        "--path-separator",
        "--search-path",
        "--max-results",
        "--batch-size",
        "--ignore-file",
        "--format",
        "--hyperlink",
        "--exec",
        "--exec-batch",
    ),
    {"-x": E, "--exec": E, "-X": E, "--exec-batch": E, "--ignore-file": R},
    abbreviate=False,
)
_BAT = _g(
    "lHmr",
    (
        "--language",
        "--highlight-line",
        "--file-name",
        "--diff-context",
        "--tabs",
        "--wrap",
        "--terminal-width",
        "--color",
        "--italic-text",
        "--decorations",
        "--paging",
        "--pager",
        "--map-syntax",
        "--ignored-suffix",
        "--theme",
        "--style",
        "--line-range",
        "--squeeze-limit",
        "--nonprintable-notation",
        "--binary",
        "--config-file",
    ),
    {"--pager": E, "--config-file": E},
    abbreviate=False,
)
_LESS = _g(
    "bhjkoOpPtTxyzD#",
    (
        "--log-file",
        "--LOG-FILE",
        "--lesskey-file",
        "--lesskey-src",
        "--lesskey-content",
        "--pattern",
        "--prompt",
        "--tag",
        "--tag-file",
        "--tabs",
        "--max-forw-scroll",
        "--max-back-scroll",
        "--window",
        "--shift",
        "--buffers",
        "--jump-target",
        "--color",
        "--line-num-width",
        "--status-col-width",
        "--wheel-lines",
        "--header",
        "--rscroll",
        "--intr",
        "--quotes",
        "--cmd",
        "--editor",
    ),
    {
        "-o": W,
        "-O": W,
        "--log-file": W,
        "--LOG-FILE": W,
        "-k": E,
        "--lesskey-file": E,
        "--lesskey-src": E,
        "--lesskey-content": E,
        "--cmd": E,
        "--editor": E,
        "-T": R,
        "--tag-file": R,
    },
)
_MAN = _g(
    "CMSsemLrpPRE",
    (
        "--config-file",
        "--manpath",
        "--sections",
        "--extension",
        "--systems",
        "--locale",
        "--prompt",
        "--preprocessor",
        "--pager",
        "--encoding",
        "--recode",
        "--browser",
    ),
    {
        "-P": E,
        "--pager": E,
        "-H": E,
        "--html": E,
        "-X": E,
        "--gxditview": E,
        "-C": E,
        "--config-file": E,
        "--browser": E,
    },
    optional="HXT",
    long_optional=("--html", "--gxditview", "--troff-device", "--warnings"),
)
_SED = _g(
    "efl",
    ("--expression", "--file", "--line-length"),
    {"-f": E, "--file": E},
    optional="i",
    long_optional=("--in-place",),
)
_AWK = _g(
    "FvfeEilW",
    (
        "--field-separator",
        "--assign",
        "--file",
        "--source",
        "--exec",
        "--include",
        "--load",
    ),
    {
        "-f": E,
        "--file": E,
        "-E": E,
        "--exec": E,
        "-l": E,
        "--load": E,
        "-W": E,
        "-D": E,
        "--debug": E,
        "-d": WS,
        "--dump-variables": WS,
        "-o": WS,
        "--pretty-print": WS,
        "-p": WS,
        "--profile": WS,
    },
    optional="dDoLp",
    long_optional=("--dump-variables", "--debug", "--pretty-print", "--profile", "--lint"),
)
_JQ = _g(
    "fL",
    ("--from-file", "--indent", "--seq-separator"),
    {"-f": R, "--from-file": R, "--slurpfile": R, "--rawfile": R},
    long_pairs=("--arg", "--argjson", "--slurpfile", "--rawfile"),
)
_YQ = _g(
    "oIpsC",
    ("--output-format", "--input-format", "--indent", "--split-exp", "--from-file", "--expression"),
    {"-s": WS, "--split-exp": WS, "--from-file": E},
)
_SORT = _g(
    "kStTo",
    (
        "--key",
        "--buffer-size",
        "--field-separator",
        "--temporary-directory",
        "--output",
        "--compress-program",
        "--files0-from",
        "--random-source",
        "--batch-size",
        "--parallel",
        "--sort",
    ),
    {
        "-o": W,
        "--output": W,
        "--compress-program": E,
        "--files0-from": R,
        "--random-source": R,
    },
)
_TREE = _g(
    "LPIoHT",
    (
        "--charset",
        "--filelimit",
        "--timefmt",
        "--sort",
        "--gitfile",
        "--infofile",
        "--hintro",
        "--houtro",
    ),
    {"-o": W, "-R": WS, "--gitfile": R, "--infofile": R, "--hintro": R, "--houtro": R},
    abbreviate=False,
)
_XXD = _g(
    "cglosnR",
    single_values=("-cols", "-groupsize", "-len", "-seek", "-name"),
    abbreviate=False,
)
_BASE64 = _g("wio", ("--wrap", "--input", "--output"), {"-o": W, "--output": W, "-i": R})
_PS = _g(
    "oOpPuUgGtCqsN",
    (
        "--pid",
        "--ppid",
        "--sort",
        "--format",
        "--user",
        "--User",
        "--group",
        "--Group",
        "--cols",
        "--columns",
        "--rows",
        "--lines",
        "--sid",
        "--tty",
        "--quick-pid",
    ),
    {"-E": ENV},
)
_FILE = _g(
    "mfFeP",
    ("--magic-file", "--files-from", "--separator", "--exclude", "--parameter"),
    {"-f": R, "--files-from": R, "-C": WS, "--compile": WS},
)
_DU = _g(
    "BdtX",
    (
        "--block-size",
        "--max-depth",
        "--threshold",
        "--exclude",
        "--exclude-from",
        "--files0-from",
        "--time-style",
    ),
    {"-X": R, "--exclude-from": R, "--files0-from": R},
    long_optional=("--time",),
)
_ICONV = _g("fto", ("--from-code", "--to-code", "--output"), {"-o": W, "--output": W})
_SHUF = _g(
    "nio",
    ("--head-count", "--input-range", "--output", "--random-source"),
    {"-o": W, "--output": W, "--random-source": R},
)
_DIFF = _g(
    "CUIxXFSWD",
    (
        "--ignore-matching-lines",
        "--exclude",
        "--exclude-from",
        "--show-function-line",
        "--starting-file",
        "--width",
        "--ifdef",
        "--label",
        "--from-file",
        "--to-file",
        "--horizon-lines",
        "--tabsize",
        "--line-format",
        "--old-line-format",
        "--new-line-format",
        "--unchanged-line-format",
        "--old-group-format",
        "--new-group-format",
        "--changed-group-format",
        "--unchanged-group-format",
        "--palette",
    ),
    {"-X": R, "--exclude-from": R, "--from-file": R, "--to-file": R},
    long_optional=("--context", "--unified", "--color"),
)
_HASH = _g("pt", effects={"-p": E})
_PRINTF = _g("v")
_LAST = _g("fnst", ("--file", "--limit", "--since", "--until", "--time-format"), {"-f": R})
_PGREP = _g(
    "dgGPsStuUF",
    (
        "--delimiter",
        "--pgroup",
        "--group",
        "--parent",
        "--session",
        "--terminal",
        "--euid",
        "--uid",
        "--pidfile",
        "--ns",
        "--nslist",
        "--signal",
        "--runstates",
        "--env",
    ),
    {"-F": R, "--pidfile": R},
)

_JOURNALCTL = _g(
    "uDpSUtoMFgcn",
    (
        "--unit", "--user-unit", "--directory", "--file", "--root", "--image", "--lines",
        "--priority", "--since", "--until", "--identifier", "--output", "--output-fields",
        "--machine", "--field", "--grep", "--cursor", "--after-cursor", "--cursor-file",
        "--facility", "--namespace", "--vacuum-size", "--vacuum-time", "--vacuum-files",
        "--interval", "--verify-key",
    ),
    {
        "--vacuum-size": D, "--vacuum-time": D, "--vacuum-files": D, "--rotate": CH,
        "--flush": CH, "--sync": CH, "--relinquish-var": CH, "--smart-relinquish-var": CH,
        "--setup-keys": WS, "--update-catalog": WS, "--cursor-file": W, "--file": R,
        "-D": R, "--directory": R,
    },
    optional="bn",
    long_optional=("--boot", "--case-sensitive"),
)  # fmt: skip
_SS = _g(
    "AfNDF",
    ("--query", "--socket", "--family", "--net", "--diag", "--filter"),
    {"-K": CH, "--kill": CH, "-D": W, "--diag": W, "-F": R, "--filter": R},
)
_DMESG = _g(
    "FflnsS",
    ("--file", "--facility", "--level", "--console-level", "--buffer-size", "--since",
     "--until", "--time-format"),
    {
        "-C": D, "--clear": D, "-c": D, "--read-clear": D, "-D": CH, "--console-off": CH,
        "-E": CH, "--console-on": CH, "-n": CH, "--console-level": CH, "-F": R, "--file": R,
    },
)  # fmt: skip
_TOP = _g("dnpuUoEe", optional="w")

# --------------------------------------------------------------------------- the list

_DATA = Reader(_PLAIN, "data")
_NAMES = Reader(_PLAIN, "names")
_PATHS = Reader(_PLAIN, "paths")

READERS: dict[str, Reader] = {
    **{
        name: _DATA
        for name in (
            "pwd",
            "echo",
            "true",
            "false",
            ":",
            "whoami",
            "id",
            "groups",
            "uname",
            "which",
            "type",
            "whereis",
            "basename",
            "dirname",
            "tr",
            "seq",
            "test",
            "[",
            "[[",
            "free",
            "uptime",
            "nproc",
            "locale",
            "lsblk",
            "lscpu",
            "arch",
            "tty",
            "sleep",
            "wait",
            "dirs",
            "popd",
            "getconf",
            "cal",
            "numfmt",
            "yes",
            "expr",
            "w",
            "who",
            "users",
            "logname",
            "vmstat",
            "iostat",
            "tput",
            "clear",
            "help",
            "tldr",
            "mktemp",
            "lsof",
        )
    },
    **{name: _NAMES for name in ("ls", "dir", "vdir", "stat", "realpath", "readlink", "df")},
    "cd": _NAMES,
    "pushd": _NAMES,
    **{
        name: _PATHS
        for name in (
            "cat",
            "tac",
            "rev",
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
            "zcat",
            "bzcat",
            "xzcat",
            "tsort",
            "comm",
        )
    },
    "wc": Reader(_g(long_values=("--files0-from",), effects={"--files0-from": R}), "paths"),
    "head": _reader("paths", "nc", ("--lines", "--bytes")),
    "tail": _reader(
        "paths", "ncs", ("--lines", "--bytes", "--pid", "--sleep-interval", "--max-unchanged-stats")
    ),
    "cut": _reader(
        "paths",
        "bcdf",
        ("--bytes", "--characters", "--delimiter", "--fields", "--output-delimiter"),
    ),
    "cmp": _reader("paths", "in", ("--ignore-initial", "--bytes")),
    "join": _reader("paths", "aejotv12"),
    "paste": _reader("paths", "d", ("--delimiters",)),
    "nl": _reader("paths", "bdfhilnsvw"),
    "od": _reader(
        "paths", "AjNtwS", ("--address-radix", "--skip-bytes", "--read-bytes", "--format")
    ),
    "hexdump": Reader(_g("efns", effects={"-f": R}), "paths"),
    "strings": _reader(
        "paths", "nteTs", ("--bytes", "--radix", "--encoding", "--target", "--output-separator")
    ),
    "column": _reader("paths", "csoNRHWTEnl"),
    "fold": _reader("paths", "w", ("--width",)),
    "fmt": _reader("paths", "wpg", ("--width", "--prefix", "--goal")),
    "pr": _reader("paths", "hwlNoWD"),
    "expand": _reader("paths", "t", ("--tabs",)),
    "unexpand": _reader("paths", "t", ("--tabs",)),
    "look": Reader(_g("t"), "paths", text=1),
    "grep": _GREP_READER,
    "egrep": _GREP_READER,
    "fgrep": _GREP_READER,
    "zgrep": _GREP_READER,
    "rg": _RG_READER,
    "ag": Reader(_AG, "paths", text=1, no_text=frozenset({"-g"})),
    "ack": Reader(_ACK, "paths", text=1, no_text=frozenset({"-f", "-g"})),
    "fd": Reader(_FD, "names", text=1),
    "fdfind": Reader(_FD, "names", text=1),
    "bat": Reader(_BAT, "paths", subcommands={"cache": WS}),
    "batcat": Reader(_BAT, "paths", subcommands={"cache": WS}),
    "exa": _reader("names", "LsIt", ("--level", "--sort", "--ignore-glob", "--time")),
    "eza": _reader("names", "LsIt", ("--level", "--sort", "--ignore-glob", "--time")),
    "tree": Reader(_TREE, "names", reads_operands=frozenset({"--fromfile"})),
    "du": Reader(_DU, "names"),
    "file": Reader(_FILE, "names"),
    "less": Reader(_LESS, "paths", plus=True),
    "more": Reader(_g("n"), "paths", plus=True),
    "man": Reader(_MAN, "data", reads_operands=frozenset({"-l", "--local-file"})),
    "sed": Reader(
        _SED,
        "paths",
        text=1,
        text_options=frozenset({"-e", "--expression", "-f", "--file"}),
        program=sed_program,
        in_place=frozenset({"-i", "--in-place"}),
    ),
    **{
        name: Reader(
            _AWK,
            "paths",
            text=1,
            text_options=frozenset({"-e", "--source", "-f", "--file", "-E", "--exec"}),
            program=awk_program,
        )
        for name in ("awk", "gawk", "mawk", "nawk")
    },
    "jq": Reader(
        _JQ, "paths", text=1, text_options=frozenset({"-f", "--from-file"}), program=jq_program
    ),
    "yq": Reader(
        _YQ,
        "paths",
        text=1,
        program=yq_program,
        in_place=frozenset({"-i", "--inplace"}),
    ),
    "sort": Reader(_SORT, "paths"),
    "uniq": Reader(
        _g("fsw", ("--skip-fields", "--skip-chars", "--check-chars")), "paths", outputs=1
    ),
    "xxd": Reader(_XXD, "paths", outputs=1, traits=decoding("r", "-revert")),
    "base64": Reader(_BASE64, "paths", traits=decoding("dD", "--decode")),
    "iconv": Reader(_ICONV, "paths"),
    "shuf": Reader(_SHUF, "paths"),
    "diff": Reader(_DIFF, "paths"),
    "ps": Reader(_PS, "data", program=ps_options),
    "hash": Reader(_HASH, "data"),
    "printf": Reader(_PRINTF, "data"),
    "last": Reader(_LAST, "data"),
    "pgrep": Reader(_PGREP, "data"),
    "journalctl": Reader(_JOURNALCTL, "data"),
    "ss": Reader(_SS, "data"),
    "dmesg": Reader(_DMESG, "data"),
    "top": Reader(_TOP, "data"),
    **{
        n: _DATA
        for n in ("netstat", "findmnt", "lsmod", "lspci", "lsusb", "htop", "lsb_release", "sw_vers")
    },
}


def reader_is_read(name: str, args: list[Word]) -> bool:
    """True when the grammar finds nothing but harmless options (used where only a yes/no is
    wanted; the full analysis with its findings is `readers.read_command`)."""
    reader = READERS[name]
    parsed = parse(args, reader.grammar)
    return not any(o.name in reader.grammar.effects for o in parsed.options)


def _checker(name: str) -> Checker:
    return lambda args: reader_is_read(name, args)


# --------------------------------------------------------------------------- find


def _find(args: list[Word]) -> bool:
    return not any(p in FIND_ACTS or p in FIND_WRITES for p, _ in find_primaries(args))


def _date(args: list[Word]) -> bool:
    p = parse(args, _g("dfrI", ("--date", "--file", "--reference", "--set"), optional="I"))
    return not p.has("-s", "--set") and all(w.text.startswith("+") for w in p.operands)


def _command(args: list[Word]) -> bool:
    vals = [a.text for a in args]
    return bool(vals) and vals[0] in ("-v", "-V")


READ_ONLY: dict[str, Checker] = {
    **{name: _checker(name) for name in READERS},
    "date": _date,
    "hostname": lambda args: (
        all(a.text.startswith("-") for a in args)
        and not any(a.text in ("-F", "--file", "-b", "--boot") for a in args)
    ),
    "find": _find,
    "command": _command,
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
        "diff",
    }
)
#: Options of git's reading subcommands that run a program or write a file.
_GIT_UNSAFE = (
    "--output",
    "--ext-diff",
    "--textconv",
    "--open-files-in-pager",
    "-O",
    "--filters",
    "--exec",
)
#: Subcommands that change files unless given -n/--dry-run.
_GIT_DRY_RUN = frozenset({"clean", "add", "rm", "mv", "commit"})
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
#: git's options that take a separate value, by the subcommands that have them.
_GIT_VALUES = frozenset(
    {
        "-n",
        "--max-count",
        "--skip",
        "--since",
        "--after",
        "--until",
        "--before",
        "--author",
        "--committer",
        "--grep",
        "--format",
        "--pretty",
        "-S",
        "-G",
        "--date",
        "-L",
        "--encoding",
        "-U",
        "--sort",
        "--points-at",
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "-e",
        "--abbrev",
    }
)


def _git_positional(rest: list[str]) -> list[str]:
    out, skip = [], False
    for v in rest:
        if skip:
            skip = False
        elif v in _GIT_VALUES:
            skip = True
        elif not v.startswith("-"):
            out.append(v)
    return out


def _git_listing(sub: str, rest: list[str]) -> bool:
    flags = [v for v in rest if v.startswith("-")]
    positional = _git_positional(rest)
    if sub == "branch":
        return not any(f.split("=")[0] in _BRANCH_WRITE for f in flags) and (
            not positional or any(f.split("=")[0] in _BRANCH_LIST for f in flags)
        )
    if sub == "tag":
        return not positional or any(f in ("-l", "--list", "--contains") for f in flags)
    if sub == "remote":  # `show NAME` asks the remote unless -n
        return (
            not positional
            or positional[0] == "get-url"
            or (positional[0] == "show" and "-n" in flags)
        )
    if sub in ("stash", "worktree", "notes", "submodule"):
        return bool(positional) and positional[0] in ("list", "show", "status")
    if sub == "reflog":
        return not positional or positional[0] == "show"
    if sub == "config":
        return any(f in ("--get", "--get-all", "--get-regexp", "--list", "-l") for f in flags)
    if sub in _GIT_DRY_RUN:
        return any(f in ("-n", "--dry-run") or (f[:2] != "--" and "n" in f[1:]) for f in flags)
    return False


def git_is_read(sub: str, rest: list[Word]) -> bool:
    """True when `git <sub> <rest>` only reads the repository."""
    vals = [w.text for w in rest]
    if any(v.startswith(_GIT_UNSAFE) for v in vals):
        return False
    if sub in _GIT_READ:
        return True
    return _git_listing(sub, vals)


def git_remote_contacted(sub: str, rest: list[Word]) -> bool:
    """`git remote show NAME` asks the remote (unless -n); so does `git remote update`."""
    if sub != "remote":
        return False
    vals = [w.text for w in rest]
    pos = [v for v in vals if not v.startswith("-")]
    return (pos[:1] == ["show"] and len(pos) > 1 and "-n" not in vals) or pos[:1] == ["update"]
