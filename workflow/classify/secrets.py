"""Secrets reached without naming a protected file (issue 18): programs other than
`env`/`printenv` that print the environment, and readers that walk a whole tree holding
protected files (`grep -r password ~`)."""

from __future__ import annotations

import re

from workflow.classify.findings import finding
from workflow.classify.rules import env_dump
from workflow.classify.shellstate import ShellState, Word, shown
from workflow.classify.targets import contains_protected
from workflow.classify.taxonomy import Category, RiskClass, Severity

_JQ_ENV = re.compile(r"(?<![\w.$])env\b|\$ENV\b|\$__prog_env\b")
_AWK_ENV = re.compile(r"\bENVIRON\b")
_GREP_RECURSIVE = frozenset(
    {"-r", "-R", "--recursive", "--dereference-recursive", "--directories=recurse"}
)
_GREP_VALUE = frozenset(
    {
        "-e",
        "-f",
        "-m",
        "-A",
        "-B",
        "-C",
        "-d",
        "-D",
        "--regexp",
        "--file",
        "--max-count",
        "--include",
        "--exclude",
        "--exclude-dir",
        "--label",
        "--context",
    }
)
_RG_VALUE = frozenset(
    {
        "-e",
        "-f",
        "-g",
        "-t",
        "-T",
        "-m",
        "-A",
        "-B",
        "-C",
        "-j",
        "-M",
        "-E",
        "--glob",
        "--iglob",
        "--type",
        "--type-not",
        "--regexp",
        "--file",
        "--max-count",
        "--context",
        "--max-depth",
        "--threads",
        "--encoding",
        "--pre",
        "--pre-glob",
        "--sort",
        "--sortr",
    }
)


def _ps_environment(args: list[Word]) -> bool:
    """`ps e`, `ps eww`, `ps auxe`: BSD-style option clusters with `e` show each environment."""
    return any(
        w.value is not None and w.value.isalpha() and "e" in w.value and not w.value.startswith("-")
        for w in args[:3]
    )


def _prints_environment(name: str, args: list[Word]) -> bool:
    if name == "ps":
        return _ps_environment(args)
    if name in ("jq", "gojq", "jaq"):
        return any(w.value is not None and _JQ_ENV.search(w.value) for w in args)
    if name in ("awk", "gawk", "mawk", "nawk"):
        return any(w.value is not None and _AWK_ENV.search(w.value) for w in args)
    if name in ("systemctl", "tmux", "launchctl"):
        return any(w.value in ("show-environment", "showenv", "getenv", "export") for w in args)
    return False


def _operands(args: list[Word], with_value: frozenset[str], pattern: bool) -> list[Word]:
    out: list[Word] = []
    i = 0
    explicit = False
    while i < len(args):
        v = args[i].text
        if v == "--":
            out.extend(args[i + 1 :])
            break
        if v.startswith("-") and v != "-":
            explicit = explicit or v.split("=", 1)[0] in ("-e", "-f", "--regexp", "--file")
            i += 2 if v in with_value else 1
            continue
        out.append(args[i])
        i += 1
    return out[1:] if pattern and not explicit and out else out


def _walked_roots(name: str, args: list[Word]) -> list[Word] | None:
    """The directories a recursive content reader walks, or None when it does not recurse."""
    flags = {w.text for w in args if w.text.startswith("-")}
    if name in ("grep", "egrep", "fgrep", "zgrep"):
        clusters = {w.text for w in args if w.text[:1] == "-" and w.text[1:2] != "-"}
        recursive = flags & _GREP_RECURSIVE or any(set(c[1:]) & {"r", "R"} for c in clusters)
        if not recursive:
            return None
        return _operands(args, _GREP_VALUE, pattern=True) or [Word.of(".")]
    if name in ("rg", "ag"):
        hidden = flags & {"--hidden", "-uu", "-uuu", "--unrestricted", "-.", "-a", "--all-types"}
        if not hidden and sum(w.text == "-u" for w in args) < 2:
            return None
        return _operands(args, _RG_VALUE, pattern=True) or [Word.of(".")]
    return None


def check(name: str, args: list[Word], st: ShellState) -> None:
    """Adds the findings for secrets `name args` reaches without naming them."""
    if _prints_environment(name, args):
        st.add(env_dump(shown([Word.of(name), *args])))
    roots = _walked_roots(name, args)
    for root in roots or ():
        hit = contains_protected(root.approx, st.cwd, st.rules)
        if hit is not None:
            st.add(
                finding(
                    "target.protected_tree",
                    f"`{shown([Word.of(name), *args])}` reads every file under `{root.text}`, "
                    f"which holds protected secrets ({hit}) (secret_access, critical).",
                    RiskClass.EGRESS,
                    Severity.CRITICAL,
                    Category.SECRET_ACCESS,
                )
            )
