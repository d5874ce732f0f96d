"""Data shared by the shell parser (`shell.py`) and the per-command rules (`commands.py`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from workflow.classify.findings import Finding
from workflow.classify.program_env import PROGRAM_VARIABLES
from workflow.classify.targets import UNKNOWN_PART, PathRules

#: Stands for a part of a word only known at run time (a variable, a substitution).
DYNAMIC = UNKNOWN_PART

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
            # pagers, editors and preprocessors that "read-only" programs run
            "GIT_PAGER",
            "MANPAGER",
            "MANOPT",
            "SYSTEMD_PAGER",
            "PSQL_PAGER",
            "BAT_PAGER",
            "VISUAL",
            "BROWSER",
            "GIT_EDITOR",
            "GIT_SEQUENCE_EDITOR",
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "SUDO_ASKPASS",
            "GIT_PROXY_COMMAND",
            "GIT_SSH",
            "GIT_EXEC_PATH",
            "GIT_TEMPLATE_DIR",
            "GIT_DIR",
            "GIT_WORK_TREE",
            "RIPGREP_CONFIG_PATH",
            "TAR_OPTIONS",
            "GREP_OPTIONS",
            "MAKEFLAGS",
            "XDG_CONFIG_HOME",
            "EXINIT",
            "VIMINIT",
            "MYVIMRC",
            "INPUTRC",
            "HOSTALIASES",
            # interpreters' start-up code and module paths
            "PERL5OPT",
            "PERL5LIB",
            "PERLLIB",
            "RUBYOPT",
            "RUBYLIB",
            "NODE_PATH",
            "PYTHONHOME",
            "PYTHONINSPECT",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "GCONV_PATH",
            # the shell's own behaviour: prompts, directories, globbing, start-up files
            "PS0",
            "PS1",
            "PS2",
            "PS3",
            "HOME",
            "OLDPWD",
            "CDPATH",
            "GLOBIGNORE",
            "ZDOTDIR",
            "FPATH",
            "BASH_XTRACEFD",
            "BASH_LOADABLES_PATH",
            "BASH_COMPAT",
        }
    )
    | PROGRAM_VARIABLES
)  # variables that make a read-only program run something (program_env)
#: Families of such variables: history (`HISTFILE`, `HISTSIZE`...), exported functions
#: (`BASH_FUNC_name%%`), git configuration (`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`), less
#: (`LESSOPEN`, `LESS`), the dynamic loader and npm configuration.
SENSITIVE_PREFIXES = (
    "HIST",
    "BASH_FUNC_",
    "GIT_CONFIG",
    "LESS",
    "LD_",
    "DYLD_",
    "npm_config_",
    "NPM_CONFIG_",
)
_PAGERS = frozenset({"PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER", "PSQL_PAGER", "BAT_PAGER"})
#: Values of a pager variable that only display text (`GIT_PAGER=cat git log` is everyday use).
SAFE_PAGERS = frozenset(
    {"", "cat", "less", "more", "less -R", "less -FRX", "less -FRSX", "less -S"}
)


def is_sensitive(name: str, value: str | None = None) -> bool:
    """True when setting `name` (to `value`, when known) can change what a later word runs."""
    if name in _PAGERS and value is not None and value.strip() in SAFE_PAGERS:
        return False
    return name in SENSITIVE_VARS or name.startswith(SENSITIVE_PREFIXES)


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word after quoting is removed.

    `value` is the exact static text, or None when part of it is only known at run time;
    `approx` is the text with those parts replaced by `DYNAMIC`, for path checks.
    `traits` are those of command substitutions inside the word (a fetched payload...).
    `alts` are texts the word may have at run time that the analysis can see: the default of
    `${X:-~/.netrc}`, the value assigned to `f` earlier in the line; paths check them too.
    """

    value: str | None
    approx: str
    traits: frozenset[str] = frozenset()
    alts: tuple[str, ...] = ()  # other texts it may have (`${X:-d}`, `f=…; "$f"`), for paths

    @property
    def text(self) -> str:
        return self.value if self.value is not None else self.approx

    @staticmethod
    def of(text: str) -> Word:
        return Word(text, text)


UNKNOWN_WORD = Word(None, DYNAMIC)
#: How many alternative texts a word or a variable keeps.
MAX_ALTS = 16


def texts_of(word: Word) -> list[str]:
    """Every text `word` may have that the analysis knows: its own and its alternatives."""
    return [word.text, *word.alts] if word.alts else [word.text]


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


#: The classifier's work per proposal is bounded (issue 13: one proposal must not stall the
#: others): steps (syntax nodes visited plus words analysed), nesting (syntax nodes inside
#: each other, wrappers inside wrappers) and the words of an argv list. Past a bound the
#: analysis stops and the command fails closed.
MAX_WORK = 5_000
MAX_NESTING = 100
MAX_ARGV_WORDS = 4_096


class Exhausted(Exception):
    """The analysis of one command went past a bound on its work; it fails closed."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


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
    #: Texts assigned to each variable earlier in the line (`f=~/.ssh/id_rsa`, `for f in …`).
    values: dict[str, list[str]] = field(default_factory=dict)
    work: int = 0
    nesting: int = 0

    def charge(self, steps: int = 1) -> None:
        """Counts work; raises `Exhausted` past `MAX_WORK`."""
        self.work += steps
        if self.work > MAX_WORK:
            raise Exhausted(f"takes more than {MAX_WORK} analysis steps")

    def enter(self) -> None:
        """One level deeper (a syntax node inside another, a wrapper inside a wrapper)."""
        if self.nesting >= MAX_NESTING:
            raise Exhausted(f"nests more than {MAX_NESTING} levels deep")
        self.nesting += 1

    def leave(self) -> None:
        self.nesting -= 1

    def remember(self, name: str, texts: list[str]) -> None:
        known = self.values.setdefault(name, [])
        for text in texts:
            if text and text != DYNAMIC and text not in known and len(known) < MAX_ALTS:
                known.append(text)

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
