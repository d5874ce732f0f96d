"""Commands assembled from data: `xargs`, `parallel`, `find -exec` (issue 18).

Each runs a command whose arguments, or whole text, come from input only known at run time.
The command is analysed with those parts unknown: a replacement string (`{}`, `-I R`) makes
the words holding it unknown, so `xargs -I{} sh -c '{}'` runs unknown code. A shell or an
interpreter run this way fails closed whatever feeds it (its code or its script comes from
data), and `parallel` with no command runs each input line as a command. Files the input is
read from (`xargs -a F`, `parallel :::: F`) are read, so they go through the path rules.
"""

from __future__ import annotations

import re

from workflow.classify import commands, rules
from workflow.classify.findings import finding
from workflow.classify.grammar import find_primaries
from workflow.classify.readonly import READ_ONLY
from workflow.classify.shellstate import (
    DYNAMIC,
    MAX_ALTS,
    UNKNOWN_WORD,
    ShellState,
    Word,
    shown,
)
from workflow.classify.targets import Access, check_path
from workflow.classify.taxonomy import Category, RiskClass, Severity

_PARALLEL_REPLACEMENT = re.compile(r"\{(?:[0-9]*(?:\.|/|//|/\.)?|#|%|=.*?=)\}")


def runs_interpreter(words: list[Word]) -> str | None:
    """The shell or interpreter `words` run, looking through plain wrappers, or None."""
    rest = words
    for _ in range(8):
        if not rest or rest[0].value is None:
            return None
        name = commands.command_name(rest[0].value)
        if name is None:
            return None
        if name in commands.SHELLS or name in commands.INTERPRETERS:
            return name
        if name in ("eval", "source", "."):
            return name
        if name not in _PLAIN_WRAPPERS:
            return None
        rest = commands.skip_options(rest[1:], frozenset({"-u", "-n", "-s", "-k", "-C"}))
        if name in ("timeout", "gtimeout"):
            rest = rest[1:]
        while name == "env" and rest and rest[0].value is not None and "=" in rest[0].value:
            rest = rest[1:]
    return None


_PLAIN_WRAPPERS = frozenset(
    {
        "env",
        "nohup",
        "time",
        "nice",
        "ionice",
        "stdbuf",
        "setsid",
        "command",
        "builtin",
        "exec",
        "unbuffer",
        "timeout",
        "gtimeout",
        "sudo",
        "doas",
        "chroot",
    }
)


def _interpreter_on_data(what: str, interpreter: str, st: ShellState) -> None:
    st.add(
        finding(
            "shell.interpreter_on_data",
            f"`{what}` runs `{interpreter}` on input only known at run time, so the code it "
            "runs comes from data; it fails closed (exec, high).",
            RiskClass.EXEC,
            Severity.HIGH,
            fail_closed=True,
        )
    )


def _replaced(
    words: list[Word], marker: str | re.Pattern[str], alts: tuple[str, ...] = ()
) -> tuple[list[Word], bool]:
    """`words` with every word holding the replacement string made unknown (with `alts`, the
    texts it may take, when a whole word is the replacement string)."""
    out: list[Word] = []
    hit = False
    for w in words:
        text = w.text
        found = (
            marker.search(text) is not None if isinstance(marker, re.Pattern) else (marker in text)
        )
        if found:
            hit = True
            approx = (
                marker.sub(DYNAMIC, text)
                if isinstance(marker, re.Pattern)
                else text.replace(marker, DYNAMIC)
            )
            out.append(Word(None, approx, w.traits, alts if text == marker else ()))
        else:
            out.append(w)
    return out, hit


def _input_file(path: Word, name: str, st: ShellState) -> None:
    st.add(*check_path(path.approx, st.cwd, st.rules, Access.READ, f"`{name}` reading input"))


_XARGS_VALUE = frozenset(
    {
        "-n",
        "-I",
        "-P",
        "-d",
        "-L",
        "-l",
        "-a",
        "-E",
        "-e",
        "-s",
        "-J",
        "-R",
        "-S",
        "--max-args",
        "--delimiter",
        "--arg-file",
        "--max-procs",
        "--max-lines",
        "--max-chars",
        "--eof",
        "--process-slot-var",
    }
)


def xargs(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    replace: str | None = None
    i = 0
    while i < len(args):
        w = args[i]
        v = w.text
        if v == "--":
            i += 1
            break
        if not v.startswith("-") or v == "-":
            break
        opt, eq, attached = v.partition("=") if v.startswith("--") else (v[:2], "", v[2:])
        value: Word | None = None
        if v.startswith("--") and eq:
            value = Word(attached, attached) if w.value is not None else UNKNOWN_WORD
        elif not v.startswith("--") and attached and opt in _XARGS_VALUE:
            value = Word(attached, attached) if w.value is not None else UNKNOWN_WORD
        elif opt in _XARGS_VALUE and i + 1 < len(args):
            value = args[i + 1]
            i += 1
        if opt in ("-I", "-J", "--replace"):
            replace = value.text if value is not None else "{}"
        elif opt == "-i":
            replace = attached or "{}"
        elif opt in ("-a", "--arg-file") and value is not None:
            _input_file(value, name, st)
        i += 1
    rest = args[i:] or [Word.of("echo")]
    if replace:
        rest, hit = _replaced(rest, replace)
        if not hit:
            rest = [*rest, UNKNOWN_WORD]
    else:
        rest = [*rest, UNKNOWN_WORD]
    interpreter = runs_interpreter(rest)
    if interpreter is not None:
        _interpreter_on_data(f"{name} {shown(args)}", interpreter, st)
    return commands.analyse_argv(rest, st, None)


_PARALLEL_VALUE = frozenset(
    {
        "-j",
        "--jobs",
        "-a",
        "--arg-file",
        "-d",
        "--delimiter",
        "-I",
        "-n",
        "--max-args",
        "-N",
        "-L",
        "--max-lines",
        "-E",
        "--colsep",
        "-C",
        "--joblog",
        "--results",
        "--tmpdir",
        "--timeout",
        "--delay",
        "--halt",
        "--env",
        "--block",
        "--workdir",
        "--wd",
        "--basefile",
        "--bf",
        "--transfer",
        "--return",
        "--tagstring",
        "-S",
        "--sshlogin",
        "--slf",
        "--sshloginfile",
        "--memfree",
        "--load",
        "--retries",
        "--shuf",
        "--header",
        "--sem",
    }
)
_PARALLEL_SOURCES = (":::", "::::", ":::+", "::::+")


def _parallel_options(args: list[Word], name: str, st: ShellState) -> tuple[int, bool]:
    """Where `parallel`'s options end, and whether it runs jobs on remote hosts."""
    i = 0
    remote = False
    while i < len(args) and args[i].text.startswith("-") and args[i].text not in ("-", "--"):
        opt = args[i].text.split("=", 1)[0]
        if opt in ("-S", "--sshlogin", "--slf", "--sshloginfile"):
            remote = True
        if opt in ("-a", "--arg-file") and "=" not in args[i].text and i + 1 < len(args):
            _input_file(args[i + 1], name, st)
        i += 2 if opt in _PARALLEL_VALUE and "=" not in args[i].text else 1
    return i, remote


def parallel(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    i, remote = _parallel_options(args, name, st)
    if i < len(args) and args[i].text == "--":
        i += 1
    cmd: list[Word] = []
    while i < len(args) and args[i].text not in _PARALLEL_SOURCES:
        cmd.append(args[i])
        i += 1
    source = ""
    for w in args[i:]:
        if w.text in _PARALLEL_SOURCES:
            source = w.text
        elif source.startswith("::::"):
            _input_file(w, name, st)
    if remote:
        st.add(
            finding(
                "shell.parallel_remote",
                f"`{name} {shown(args)}` runs its jobs on remote hosts over ssh (network, high).",
                RiskClass.EXEC,
                Severity.HIGH,
                Category.NETWORK,
            )
        )
    if not cmd and any(w.value in ("--version", "--help", "-V", "-h") for w in args[:i]):
        commands.base_class(commands.Base.READ, [Word.of(name), *args], st, [])
        return frozenset()
    if not cmd:
        st.add(
            rules.runs_unknown_code(
                f"`{name}` with no command runs each input line; that text", frozenset()
            )
        )
        return frozenset()
    interpreter = runs_interpreter(cmd)
    if interpreter is not None:
        _interpreter_on_data(f"{name} {shown(args)}", interpreter, st)
    if any(w.value is None for w in cmd):
        st.add(rules.runs_unknown_code(f"The `{name}` command", frozenset()))
        return frozenset()
    # parallel hands the composed line to a shell: analyse it as shell text, the input
    # standing in as an unknown variable.
    text = " ".join(w.text for w in cmd)
    if _PARALLEL_REPLACEMENT.search(text):
        text = _PARALLEL_REPLACEMENT.sub('"$PARALLEL_INPUT"', text)
    else:
        text += ' "$PARALLEL_INPUT"'
    return st.nested(text, f"The `{name}` command", st)


_FIND_NAMES = frozenset({"-name", "-iname"})
_FIND_PATHS = frozenset({"-path", "-ipath", "-wholename", "-iwholename"})


def _found_names(args: list[Word], primaries: list[tuple[str, list[Word]]]) -> tuple[str, ...]:
    """The paths `{}` may stand for, from the root and the name tests: `find ~ -name id_rsa
    -exec cat {} +` cats `~/**/id_rsa`. Without a name test it may be anything (None known)."""
    roots: list[str] = []
    for w in args:  # the starting points come before the first expression word
        if w.text.startswith(("-", "(", "!", ")")):
            break
        roots.append(w.text)
    out: list[str] = []
    for primary, values in primaries:
        if values and primary in _FIND_NAMES:
            out.extend(f"{root.rstrip('/')}/**/{values[0].text}" for root in roots or ["."])
        elif values and primary in _FIND_PATHS:
            out.append(values[0].text)
    return tuple(out[:MAX_ALTS])


_FIND_WRITES = frozenset({"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"})


def find(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    traits: set[str] = set()
    primaries = list(find_primaries(args))  # grammar.py: a value is never a primary
    found = _found_names(args, primaries)
    for primary, values in primaries:
        if primary in ("-exec", "-execdir", "-ok", "-okdir"):
            # GNU find replaces `{}` anywhere inside an argument, not only a whole `{}`.
            inner, _ = _replaced(values, "{}", found)
            interpreter = runs_interpreter(inner)
            if interpreter is not None:
                _interpreter_on_data(f"find {shown(args)}", interpreter, st)
            traits |= commands.analyse_argv(inner, st, None)
    rules.find_rules(args, st)
    checker = READ_ONLY["find"]
    roots = [w for w in args if not w.text.startswith(("-", "(", "!", ")"))][:1]
    base = commands.Base.READ if checker(args) else commands.Base.EXEC
    if base is commands.Base.EXEC and all(w.value not in _FIND_WRITES for w in args):
        base = commands.Base.WRAPPED  # only -exec: the class comes from the commands it runs
    commands.base_class(base, [Word.of(name), *args], st, roots)
    return frozenset(traits)
