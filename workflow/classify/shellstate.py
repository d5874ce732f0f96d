"""Data shared by the shell parser (`shell.py`) and the per-command rules (`commands.py`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from workflow.classify.findings import Finding
from workflow.classify.program_env import PROGRAM_VARIABLES
from workflow.classify.targets import PathRules

#: Stands for a part of a word only known at run time (a variable, a substitution).
DYNAMIC = "__dynamic__"

FETCH = "fetch"  # the command downloads or receives data from the network
DECODE = "decode"  # the command turns encoded text into something runnable
INTERP = "interp"  # the command runs code it reads from its standard input


#: Variables that change what a command runs or loads: setting one for a command, as
#: `VAR=value cmd` or `env VAR=value cmd`, fails closed.
SENSITIVE_VARS = (
    frozenset(
        {
            "PATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "IFS",
            "BASH_ENV",
            "ENV",
            "PROMPT_COMMAND",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "NODE_OPTIONS",
            "GIT_SSH_COMMAND",
            "GIT_EXTERNAL_DIFF",
            "PAGER",
            "EDITOR",
            "SHELLOPTS",
            "BASHOPTS",
            "PS4",
        }
    )
    | PROGRAM_VARIABLES
)  # program_env.py (options)


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word after quoting is removed.

    `value` is the exact static text, or None when part of it is only known at run time;
    `approx` is the text with those parts replaced by `DYNAMIC`, for path checks.
    `traits` are those of command substitutions inside the word (a fetched payload...).
    """

    value: str | None
    approx: str
    traits: frozenset[str] = frozenset()

    @property
    def text(self) -> str:
        return self.value if self.value is not None else self.approx

    @staticmethod
    def of(text: str) -> Word:
        return Word(text, text)


UNKNOWN_WORD = Word(None, DYNAMIC)


@dataclass(frozen=True)
class Template:
    """An operator argv template, compiled."""

    source: str
    tokens: tuple[re.Pattern[str], ...]
    rest: bool

    def matches(self, argv: list[Word]) -> bool:
        if len(argv) < len(self.tokens) or (len(argv) > len(self.tokens) and not self.rest):
            return False
        for token, word in zip(self.tokens, argv, strict=False):
            if word.value is None:
                if token.pattern != ".*":
                    return False
            elif not token.fullmatch(word.value):
                return False
        return True


@dataclass
class ShellState:
    """What the analysis of one command line needs and collects."""

    rules: PathRules
    trusted: tuple[str, ...]
    read_templates: tuple[Template, ...]
    exec_templates: tuple[Template, ...]
    cwd: str | None
    nested: Callable[[str, str, ShellState], frozenset[str]]
    depth: int = 0
    findings: list[Finding] = field(default_factory=list)
    downloaded: set[str] = field(default_factory=set)

    def add(self, *items: Finding) -> None:
        for item in items:
            if item not in self.findings:
                self.findings.append(item)


def shown(words: list[Word], limit: int = 80) -> str:
    """A command as an approver reads it, shortened."""
    text = " ".join(w.text.replace(DYNAMIC, "…") for w in words)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _token_regex(token: str) -> re.Pattern[str]:
    if token in ("*", "**"):
        return re.compile(".*")
    out = ["[^ ]*" if c == "*" else "." if c == "?" else re.escape(c) for c in token]
    return re.compile("".join(out))


def compile_template(source: str) -> Template:
    tokens = source.split()
    rest = bool(tokens) and tokens[-1] == "**"
    if rest:
        tokens = tokens[:-1]
    return Template(source, tuple(_token_regex(t) for t in tokens), rest)
