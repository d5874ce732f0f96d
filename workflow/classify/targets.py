"""Targets: protected paths and human-confirm paths (DESIGN §4 layer 5, paths half).

Paths are normalised lexically before matching (`~`, `$HOME`, `..`, relative to the working
directory): the classifier is pure and cannot resolve symlinks, so `./a/../../.ssh/id_rsa` is
caught by arithmetic on segments, not by asking the file system.
"""

from __future__ import annotations

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
    return _MULTI_SLASH.sub("/", path) if path.startswith("//") else path


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
    return GlobSet(
        patterns,
        combined,
        tuple(re.compile(s, re.IGNORECASE) for s in sources),
        tuple(sorted(names)),
    )


@lru_cache(maxsize=1024)
def _shell_glob_segment(segment: str) -> re.Pattern[str]:
    out = []
    for ch in segment:
        out.append("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch))
    return re.compile("".join(out), re.IGNORECASE)


def glob_match(path: str, globs: GlobSet) -> str | None:
    """Like `GlobSet.match`, but a path containing shell glob characters (`~/.ss?/id_*`) also
    matches when one of its expansions could be a protected name."""
    hit = globs.match(path)
    if hit is not None or not _GLOB_CHARS.search(path):
        return hit
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if not _GLOB_CHARS.search(seg):
            continue
        seg_re = _shell_glob_segment(seg.replace("[", "?").replace("]", ""))
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
        tuple(tables.protected_read) + tuple(tables.extra_protected_read),
        tuple(tables.protected_write) + tuple(tables.extra_protected_write),
        tuple(tables.human_confirm) + tuple(tables.extra_human_confirm),
        tables.home_dir.rstrip("/") or "/",
    )


def _shown(raw: str, path: str) -> str:
    return f"`{raw}`" if raw == path else f"`{raw}` (resolves to `{path}`)"


def check_path(
    raw: str, cwd: str | None, rules: PathRules, access: Access, via: str
) -> list[Finding]:
    """Findings for one path argument. `via` names what touches it (a tool or a command)."""
    path = normalise(raw, cwd, rules.home)
    out: list[Finding] = []
    hit = glob_match(path, rules.protected_read)
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
    hit = glob_match(path, rules.protected_write)
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
    hit = glob_match(path, rules.human_confirm)
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
