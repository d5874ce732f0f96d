"""Targets: protected paths and human-confirm paths (DESIGN §4 layer 5, paths half).

Paths are normalised lexically before matching (`~`, `$HOME`, `..`, relative to the working
directory): the classifier is pure and cannot resolve symlinks, so `./a/../../.ssh/id_rsa` is
caught by arithmetic on segments, not by asking the file system.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from workflow.classify.findings import Finding, finding
from workflow.classify.memo import per_object
from workflow.classify.tables import ClassifierTables
from workflow.classify.taxonomy import Category, RiskClass, Severity

_GLOB_CHARS = re.compile(r"[*?\[]")
_HOME_VAR = re.compile(r"^(?:\$HOME|\$\{HOME\})(?=/|$)")
_MULTI_SLASH = re.compile(r"^/+")
#: Stands in a path for a part only known at run time (a variable, a substitution).
UNKNOWN_PART = "__dynamic__"
#: `/proc/<pid>/root/x` is `/x` seen from that process (a symlink-style alias of the root).
_PROC_ROOT = re.compile(r"^/proc/[^/]+/root(?=/|$)")
_PROC_CWD = re.compile(r"^/proc/(self|thread-self|[^/]+)/cwd(?=/|$)")
#: Home directories of any account: their dotfiles get the protection of `~`.
_ANY_HOME = re.compile(r"^(?:/home/[^/]+|/Users/[^/]+|/root|/var/root)(?=/|$)")
#: The service's own secrets (signing seeds, NATS credentials, its database, the data dir):
#: protected for reading and writing whatever the tables say.
SERVICE_SECRETS: tuple[str, ...] = (
    "**/.headgate/**",
    "**/.headgate",
    "**/*.seed",
    "**/*.nk",
    "**/*.creds",
    # The data dir's files by name, whatever the dir is called (a relative path in a call
    # without a cwd cannot be placed in it): the database, the webhook signing key and the
    # HTTP hooks' bearer token.
    "**/headgate.db",
    "**/headgate.db-*",
    "**/notify.key",
    "**/hook.token",
    "/var/lib/headgate/**",
    "/etc/headgate/**",
)
#: Brace expansion stops after this many words; a longer one is checked as a glob.
MAX_BRACE_WORDS = 64


class Access(Enum):
    """How a call touches a path: reads it, or writes / executes / does something unknown."""

    READ = "read"
    WRITE = "write"


def normalise(raw: str, cwd: str | None, home: str) -> str:
    """An absolute, lexically normalised path. Relative paths are taken from `cwd` (home when
    there is none); `~`, `~user` and a leading `$HOME` are expanded."""
    path = raw.strip()
    if path.startswith("file://"):
        path = path[len("file://") :]
    if path.startswith("$"):
        path = _HOME_VAR.sub(home, path)
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    elif path.startswith("~"):
        user, _, rest = path[1:].partition("/")
        path = ("/root" if user == "root" else f"/home/{user}") + "/" + rest
    if not path.startswith("/"):
        base = normalise(cwd, None, home) if cwd else home
        path = posixpath.join(base, path)
    path = posixpath.normpath(path)
    path = _MULTI_SLASH.sub("/", path) if path.startswith("//") else path
    if path.startswith("/proc/"):
        for _ in range(8):
            m = _PROC_CWD.match(path)
            if m is not None:
                own = m.group(1) in ("self", "thread-self")
                base = (normalise(cwd, None, home) if cwd else home) if own else "/" + UNKNOWN_PART
                path = posixpath.normpath(base + path[m.end() :])
                continue
            stripped = _PROC_ROOT.sub("", path, count=1)
            if stripped == path:
                break
            path = stripped or "/"
    return path


_ANYWHERE = "(?:.*/)?"


def _glob_parts(pattern: str, home: str) -> tuple[bool, str]:
    """One path glob (see the tables module for the syntax) as (anywhere, regex source):
    `anywhere` when it starts with `**/`, the regex then being `_ANYWHERE` + the source."""
    if pattern == "~" or pattern.startswith("~/"):
        pattern = home.rstrip("/") + pattern[1:]
    anywhere = pattern.startswith("**/")
    if anywhere:
        pattern = pattern[3:]
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return anywhere, "".join(out)


@dataclass(frozen=True)
class GlobSet:
    """A compiled list of path globs: one combined regex for the common no-match case."""

    patterns: tuple[str, ...]
    combined: re.Pattern[str]
    each: tuple[re.Pattern[str], ...]
    names: tuple[str, ...]

    def match(self, path: str) -> str | None:
        """The first glob matching `path`, or None."""
        if not self.combined.fullmatch(path):
            return None
        for pattern, regex in zip(self.patterns, self.each, strict=True):
            if regex.fullmatch(path):
                return pattern
        return None  # pragma: no cover - the combined regex matched, so one of these did


@lru_cache(maxsize=64)
def compile_globs(patterns: tuple[str, ...], home: str) -> GlobSet:
    parts = [_glob_parts(p, home) for p in patterns]
    sources = [_ANYWHERE + body if anywhere else body for anywhere, body in parts]
    # The combined regex matches the same paths as the alternation of `sources`, but the
    # `**/` globs share one `(?:.*/)?` prefix: the engine walks back over the directories
    # once instead of once per glob (about twice as fast on a path that matches none).
    anywhere_bodies = [f"(?:{body})" for anywhere, body in parts if anywhere]
    alternatives = [f"(?:{body})" for anywhere, body in parts if not anywhere]
    if anywhere_bodies:
        alternatives.insert(0, f"{_ANYWHERE}(?:{'|'.join(anywhere_bodies)})")
    combined = re.compile("|".join(alternatives) or "(?!)", re.IGNORECASE)
    names: set[str] = set()
    for p in patterns:
        for seg in p.split("/"):
            if seg and seg not in ("~", "**"):
                names.add(seg.replace("*", "").replace("?", "x"))
                names.add(seg.replace("*", "x").replace("?", "x"))
    return GlobSet(
        patterns,
        combined,
        tuple(re.compile(s, re.IGNORECASE) for s in sources),
        tuple(sorted(names)),
    )


@lru_cache(maxsize=1024)
def _shell_glob_segment(segment: str, unknown: bool) -> re.Pattern[str]:
    """One path segment as the shell matches it: `*`, `?` and `[...]` (any one character:
    `[w]`, `[!x]`, `[a-z]` alike) never match a leading dot; an unknown part (`unknown`) may
    stand for any text of the segment, dots included."""
    out = ["(?!\\.)"] if segment[:1] in ("*", "?", "[") else []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if unknown and segment.startswith(UNKNOWN_PART, i):
            out.append("[^/]*")
            i += len(UNKNOWN_PART)
            continue
        close = segment.find("]", i + 2) if ch == "[" else -1
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif close != -1:
            out.append("[^/]")
            i = close
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.IGNORECASE)


def _guessable(segment: str, unknown: bool) -> bool:
    """A segment worth guessing names for: wildcards or unknown parts mixed with literal text
    (`.ss?`, `id_*`, `.$X`). A segment that is only a wildcard (`*`) or only unknown (`$F`)
    could be any name, so it is not guessed (`ls *` is not a read of every secret)."""
    if unknown and UNKNOWN_PART in segment:
        rest = segment.replace(UNKNOWN_PART, "")
    elif _GLOB_CHARS.search(segment):
        rest = segment
    else:
        return False
    return bool(rest.replace("*", "").replace("?", "").strip("[]!^"))


def glob_match(path: str, globs: GlobSet, unknown: bool = False) -> str | None:
    """Like `GlobSet.match`, but a path containing shell glob characters (`~/.ss?/id_*`), or
    with `unknown` parts only known at run time (`~/.$X/id_rsa`), also matches when one of
    its expansions could be a protected name."""
    hit = globs.match(path)
    if hit is not None:
        return hit
    if not _GLOB_CHARS.search(path) and not (unknown and UNKNOWN_PART in path):
        return None
    # Any depth under a home or the root before a literal name (`find ~ -name credentials`):
    # try the protected directories there. A project tree (`find . -name README.md`) or a
    # wildcard name (`find ~ -name '*.md'`) is not guessed that way.
    root, _, tail = path.partition("/**/")
    if (
        tail
        and not _GLOB_CHARS.search(tail)
        and (root in ("", "/home", "/Users") or _ANY_HOME.fullmatch(root))
    ):
        for name in ("", *globs.names):
            hit = glob_match(path.replace("/**/", f"/{name}/" if name else "/", 1), globs, unknown)
            if hit is not None:
                return hit
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if not _guessable(seg, unknown):
            continue
        seg_re = _shell_glob_segment(seg, unknown)
        for name in globs.names:
            if seg_re.fullmatch(name):
                candidate = "/".join([*segments[:i], name, *segments[i + 1 :]])
                hit = globs.match(candidate)
                if hit is not None:
                    return hit
    return None


@dataclass(frozen=True)
class PathRules:
    """The three path lists of a ClassifierTables, compiled."""

    protected_read: GlobSet
    protected_write: GlobSet
    human_confirm: GlobSet
    home: str


@lru_cache(maxsize=16)
def _compiled(
    read: tuple[str, ...], write: tuple[str, ...], confirm: tuple[str, ...], home: str
) -> PathRules:
    return PathRules(
        compile_globs(read, home), compile_globs(write, home), compile_globs(confirm, home), home
    )


@per_object
def path_rules(tables: ClassifierTables) -> PathRules:
    """The compiled path lists of `tables`, built once per tables object."""
    return _compiled(
        tuple(tables.protected_read) + tuple(tables.extra_protected_read) + SERVICE_SECRETS,
        tuple(tables.protected_write) + tuple(tables.extra_protected_write) + SERVICE_SECRETS,
        tuple(tables.human_confirm) + tuple(tables.extra_human_confirm),
        tables.home_dir.rstrip("/") or "/",
    )


def _shown(raw: str, path: str) -> str:
    return f"`{raw}`" if raw == path else f"`{raw}` (resolves to `{path}`)"


def brace_words(text: str, limit: int = MAX_BRACE_WORDS) -> list[str] | None:
    """The words brace expansion makes of `text` (`~/.{ssh,aws}/x`, `f{1..3}`), or None when
    there would be more than `limit`. Text without a brace pair is its own only word."""
    words = [text]
    for _ in range(limit):
        grown: list[str] = []
        changed = False
        for word in words:
            try:
                parts = _brace_split(word)
            except _TooMany:
                return None
            if parts is None:
                grown.append(word)
            else:
                grown.extend(parts)
                changed = True
            if len(grown) > limit:
                return None
        words = grown
        if not changed:
            return words
    return None


class _TooMany(Exception):
    """A brace range longer than `MAX_BRACE_WORDS`."""


def _brace_split(word: str) -> list[str] | None:
    """One level of brace expansion of the first `{…,…}` or `{a..b}` in `word`, or None."""
    start = word.find("{")
    while start != -1:
        depth, end, commas = 0, -1, []
        for j in range(start, len(word)):
            if word[j] == "{":
                depth += 1
            elif word[j] == "}":
                depth -= 1
                if depth == 0:
                    end = j
                    break
            elif word[j] == "," and depth == 1:
                commas.append(j)
        if end == -1:
            return None
        head, body, tail = word[:start], word[start + 1 : end], word[end + 1 :]
        if commas:
            cuts = [start, *commas, end]
            return [head + word[a + 1 : b] + tail for a, b in itertools.pairwise(cuts)]
        lo, dots, hi = body.partition("..")
        if dots and len(lo) == 1 and len(hi) == 1 and not (lo + hi).isdigit():
            return [head + chr(c) + tail for c in range(ord(lo), ord(hi) + 1)] or None
        if dots and lo.lstrip("-").isdigit() and hi.lstrip("-").isdigit():
            a, b = int(lo), int(hi)
            if abs(b - a) > MAX_BRACE_WORDS:
                raise _TooMany
            step = 1 if b >= a else -1
            return [head + str(n) + tail for n in range(a, b + step, step)]
        start = word.find("{", start + 1)
    return None


_HOME_ROOTS = ("/home/", "/Users/", "/root", "/var/root")


def _home_aliases(path: str, home: str) -> tuple[str, ...]:
    """`/home/alice/.bashrc` as `~/.bashrc`: another account's home is protected like ours."""
    if not path.startswith(_HOME_ROOTS):
        return ()
    m = _ANY_HOME.match(path)
    if m is None or path == home or path.startswith(home + "/"):
        return ()
    return (home + path[m.end() :],)


def contains_protected(raw: str, cwd: str | None, rules: PathRules) -> str | None:
    """The protected location inside directory `raw` (a home directory, `/`, a parent of
    `~/.aws`...), for commands that read a tree recursively; None when there is none known."""
    path = normalise(raw, cwd, rules.home)
    inside = path.rstrip("/") + "/"
    if path == "/" or (rules.home + "/").startswith(inside) or _ANY_HOME.fullmatch(path):
        return "~/**"
    for pattern in rules.protected_read.patterns:
        if pattern.startswith("**"):
            continue
        root = pattern.replace("~", rules.home, 1) if pattern.startswith("~") else pattern
        root = re.split(r"[*?\[]", root, maxsplit=1)[0]
        if root.startswith(inside):
            return pattern
    return None


def check_path(
    raw: str, cwd: str | None, rules: PathRules, access: Access, via: str
) -> list[Finding]:
    """Findings for one path argument. `via` names what touches it (a tool or a command)."""
    if "\x00" in raw:  # C file APIs stop at NUL: `~/.netrc\0.txt` opens `~/.netrc`
        head = raw.split("\x00", 1)[0]
        found = check_path(head, cwd, rules, access, via)
        return found + [
            f
            for f in check_path(raw.replace("\x00", ""), cwd, rules, access, via)
            if f not in found
        ]
    if "{" not in raw:
        return _check_one(raw, cwd, rules, access, via)
    words = brace_words(raw)
    if words is None:  # too many words to list: a glob that matches each of them
        words = [re.sub(r"\{[^{}]*\}", "*", raw)]
    out: list[Finding] = []
    for word in words:
        out.extend(f for f in _check_one(word, cwd, rules, access, via) if f not in out)
    return out


def _check_one(
    raw: str, cwd: str | None, rules: PathRules, access: Access, via: str
) -> list[Finding]:
    path = normalise(raw, cwd, rules.home)
    out: list[Finding] = []
    unknown = not raw.startswith(UNKNOWN_PART)
    for alias in _home_aliases(path, rules.home):
        out.extend(
            f for f in _check_normalised(raw, alias, rules, access, via, unknown) if f not in out
        )
    out.extend(f for f in _check_normalised(raw, path, rules, access, via, unknown) if f not in out)
    return out


def _check_normalised(
    raw: str, path: str, rules: PathRules, access: Access, via: str, unknown: bool
) -> list[Finding]:
    out: list[Finding] = []
    hit = glob_match(path, rules.protected_read, unknown)
    if hit is not None:
        out.append(
            finding(
                "target.protected_read",
                f"{via} touches {_shown(raw, path)}, a protected secret location ({hit}); "
                "whatever it reads enters the agent's context (secret_access, critical).",
                RiskClass.EGRESS,
                Severity.CRITICAL,
                Category.SECRET_ACCESS,
            )
        )
    if access is Access.READ:
        return out
    hit = glob_match(path, rules.protected_write, unknown)
    if hit is not None:
        out.append(
            finding(
                "target.protected_write",
                f"{via} writes or executes on {_shown(raw, path)}, a protected location "
                f"({hit}) where a change persists or runs later (critical).",
                RiskClass.WRITE_LOCAL,
                Severity.CRITICAL,
                Category.PRIVILEGED,
            )
        )
    hit = glob_match(path, rules.human_confirm, unknown)
    if hit is not None:
        out.append(
            finding(
                "target.human_confirm",
                f"{via} changes {_shown(raw, path)}, a settings or build file ({hit}) a human "
                "should confirm (high).",
                RiskClass.WRITE_LOCAL,
                Severity.HIGH,
            )
        )
    return out
