"""One simple command, quoting removed: which rules fire (DESIGN §4 layer 6).

`analyse_argv` resolves the command name (`/bin/rm` is rm, `./rm` is a local program, `$x` is
unknowable), unwraps wrappers (`sudo`, `env`, `timeout`, `xargs`, `find -exec`...), hands
nested shell text (`bash -c`, `eval`, `su -c`, `watch`) back to the parser, applies the danger
rules in `rules.py`, and decides the base class: read (the reviewed read-only list or an
operator read template), templated exec (medium), or un-templated exec (high).
"""

from __future__ import annotations

import posixpath
from enum import Enum

from workflow.classify import builtins, rules, ruleset, secrets
from workflow.classify.findings import finding
from workflow.classify.readers import option_writes
from workflow.classify.readonly import READ_ONLY
from workflow.classify.shellstate import (
    DECODE,
    DYNAMIC,
    FETCH,
    INTERP,
    UNKNOWN_WORD,
    ShellState,
    Word,
    is_sensitive,
    shown,
)
from workflow.classify.targets import Access, check_path, normalise
from workflow.classify.taxonomy import Category, RiskClass, Severity

_STD_DIRS = frozenset(
    {
        "/bin",
        "/usr/bin",
        "/usr/local/bin",
        "/sbin",
        "/usr/sbin",
        "/usr/local/sbin",
        "/opt/homebrew/bin",
        "/run/current-system/sw/bin",
    }
)
SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "tcsh", "csh", "busybox"}
)
INTERPRETERS = frozenset(
    {
        "python",
        "python2",
        "python3",
        "perl",
        "ruby",
        "node",
        "nodejs",
        "deno",
        "bun",
        "php",
        "lua",
        "Rscript",
        "pwsh",
        "powershell",
        "osascript",
        "tclsh",
        "irb",
        "jshell",
    }
)


class Base(Enum):
    READ = "read"
    WRITE = "write"
    EXEC = "exec"
    WRAPPED = "wrapped"  # the class comes from the wrapped command


def command_name(value: str) -> str | None:
    """The program a static command word runs, or None for a local program (`./x`)."""
    if "/" not in value:
        return value
    directory, base = posixpath.split(posixpath.normpath(value))
    return base if directory in _STD_DIRS else None


def _dynamic_name(head: Word, words: list[Word], st: ShellState) -> frozenset[str]:
    if head.traits & {FETCH, DECODE}:
        st.add(
            finding(
                "shell.exec_fetched",
                f"`{shown(words)}` runs a command whose name comes from downloaded or decoded "
                "content (critical).",
                RiskClass.EXEC,
                Severity.CRITICAL,
                *((Category.NETWORK,) if FETCH in head.traits else ()),
            )
        )
    st.add(
        finding(
            "shell.dynamic_command",
            f"`{shown(words)}` computes the command name at run time (variable or "
            "substitution), so what runs cannot be known; it fails closed (exec, high).",
            RiskClass.EXEC,
            Severity.HIGH,
            fail_closed=True,
        )
    )
    return frozenset({INTERP})


def _local_program(value: str, words: list[Word], st: ShellState) -> frozenset[str]:
    path = normalise(value, st.cwd, st.rules.home)
    st.add(*check_path(value, st.cwd, st.rules, Access.WRITE, f"Running `{value}`"))
    if path in st.downloaded:
        st.add(rules.runs_download(value))
    st.add(
        finding(
            "shell.local_program",
            f"`{shown(words)}` runs the program `{value}`, whose contents are not analysed "
            "(exec, high).",
            RiskClass.EXEC,
            Severity.HIGH,
        )
    )
    return frozenset({INTERP})


def analyse_argv(
    words: list[Word], st: ShellState, stdin_text: str | None = None
) -> frozenset[str]:
    """Classify one simple command; adds findings to `st` and returns its traits."""
    st.charge(len(words) + 1)
    st.enter()
    try:
        return _analyse(words, st, stdin_text)
    finally:
        st.leave()


def _analyse(words: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    if not words:
        return frozenset()
    head = words[0]
    if head.value is None or any(c in head.value for c in "*?["):
        return _dynamic_name(head, words, st)
    name = command_name(head.value)
    if name is None:
        return _local_program(head.value, words, st)
    args = words[1:]
    if ruleset.informational(name, args):  # help, version, dry run (ruleset.py)
        base_class(Base.READ, words, st, [])
        return frozenset()
    wrapped = _WRAPPERS.get(name)
    if wrapped is not None:
        return wrapped(name, args, st, stdin_text)
    if name in SHELLS or name in INTERPRETERS or name in ("eval", "source", "."):
        traits, analysed = _interpreter(name, args, st, stdin_text)
        if not analysed:
            base_class(Base.EXEC, words, st, [])
        return traits
    if name in ("cd", "pushd", "popd"):
        _change_directory(name, args, st)
    secrets.check(name, args, st)
    feature = builtins.HANDLERS.get(name)
    if feature is not None:
        feature(name, args, st)
        if name == "read":
            builtins.remember_read(args, stdin_text, st)
    said, traits, path_args = ruleset.apply(name, args, st, stdin_text)
    if said is None:
        checker = READ_ONLY.get(name)
        base = Base.READ if checker is not None and checker(args) else Base.EXEC
    else:
        base = Base(said)
    base_class(base, words, st, path_args if path_args is not None else default_paths(args))
    return traits


def _change_directory(name: str, args: list[Word], st: ShellState) -> None:
    """Follows the working directory: a bare `cd` goes home, `cd -`/`popd` somewhere unknown."""
    targets = [a for a in args if not a.text.startswith("-") or a.text == "-"]
    if name == "cd" and not targets:
        st.cwd = st.rules.home
    elif name == "popd" or not targets or targets[-1].value in (None, "-"):
        st.cwd = "/" + DYNAMIC
    else:
        st.cwd = normalise(targets[-1].text, st.cwd, st.rules.home)


def default_paths(args: list[Word]) -> list[Word]:
    out = []
    for w in args:
        text = w.approx
        if text.startswith("--") and "=" in text:
            out.append(Word.of(text.split("=", 1)[1]))
        elif text.startswith("-") or not text:
            continue
        elif "=" in text and "/" in text.split("=", 1)[1]:
            out.append(Word.of(text.split("=", 1)[1]))
        else:
            out.append(w)
    return out


def base_class(base: Base, words: list[Word], st: ShellState, paths: list[Word]) -> None:
    cmd = shown(words)
    if base is Base.EXEC:
        if any(t.matches(words) for t in st.read_templates):
            base = Base.READ
            st.add(
                finding(
                    "shell.read_template",
                    f"`{cmd}` matches an operator read template (read, low).",
                    RiskClass.READ,
                    Severity.LOW,
                )
            )
        elif any(t.matches(words) for t in st.exec_templates):
            st.add(
                finding(
                    "shell.exec_template",
                    f"`{cmd}` matches an operator exec template (templated exec, medium).",
                    RiskClass.EXEC,
                    Severity.MEDIUM,
                )
            )
        else:
            st.add(
                finding(
                    "shell.untemplated_exec",
                    f"`{cmd}` is not a known read-only command or an operator template "
                    "(un-templated exec, high).",
                    RiskClass.EXEC,
                    Severity.HIGH,
                )
            )
    elif base is Base.READ:
        st.add(
            finding(
                "shell.read_only",
                f"`{cmd}` only reads (read, low).",
                RiskClass.READ,
                Severity.LOW,
            )
        )
    elif base is Base.WRITE:
        st.add(
            finding(
                "shell.write",
                f"`{cmd}` writes the files it names (write_local, medium).",
                RiskClass.WRITE_LOCAL,
                Severity.MEDIUM,
            )
        )
    access = Access.READ if base is Base.READ else Access.WRITE
    for w in paths:
        for candidate in (w.approx, *w.alts):
            st.add(*check_path(candidate, st.cwd, st.rules, access, f"`{cmd}`"))


# --------------------------------------------------------------------------- interpreters


def _nested(text: Word, label: str, st: ShellState) -> frozenset[str]:
    if text.value is None:
        st.add(rules.runs_unknown_code(label, text.traits))
        return frozenset()
    return st.nested(text.value, label, st)


def _flag_value(args: list[Word], flags: tuple[str, ...]) -> Word | None:
    for i, w in enumerate(args):
        if w.value in flags and i + 1 < len(args):
            return args[i + 1]
        if w.value is not None and w.value.startswith("-") and not w.value.startswith("--"):
            if w.value[-1:] in {f[-1] for f in flags if len(f) == 2} and i + 1 < len(args):
                return args[i + 1]
    return None


def _interpreter(
    name: str, args: list[Word], st: ShellState, stdin_text: str | None
) -> tuple[frozenset[str], bool]:
    """Traits, and whether the code it runs was analysed (then it adds no exec of its own)."""
    if any(a.traits & {FETCH, DECODE} for a in args):
        st.add(rules.runs_download(f"{name} {shown(args)}"))
    if name == "eval":
        static = all(a.value is not None for a in args)
        joined = Word(
            " ".join(a.text for a in args) if static else None,
            "",
            frozenset().union(*(a.traits for a in args)) if args else frozenset(),
        )
        return _nested(joined, "The `eval` text", st), joined.value is not None
    if name in ("source", "."):
        target = args[0].text if args else "/dev/stdin"
        if target in ("/dev/stdin", "-", "/proc/self/fd/0"):
            return frozenset({INTERP}), False
        _script(name, target, st)
        return frozenset(), False
    code = _flag_value(args, ("-c",) if name in SHELLS else _CODE_FLAGS)
    if code is not None and name in SHELLS:
        return _nested(code, f"The `{name} -c` text", st), code.value is not None
    if code is not None:
        st.add(rules.inline_code(name, code))
        return frozenset(), False
    if name not in SHELLS and args and args[0].value == "-m" and len(args) > 1:
        return ruleset.python_module(args[1].text, args[2:], st)
    positional = [a for a in args if not a.text.startswith("-") or a.text == "-"]
    if positional and positional[0].text not in ("-", "/dev/stdin"):
        _script(name, positional[0].text, st)
        return frozenset(), False
    if stdin_text is not None and name in SHELLS:
        # The text is analysed; when it only reads, the pipe still runs text put together at
        # run time (an approver sees the producer, not the script), so it is held as exec.
        before = len(st.findings)
        traits = _nested(Word.of(stdin_text), f"The script fed to `{name}`", st)
        if all(f.risk in (None, RiskClass.READ) for f in st.findings[before:]):
            st.add(
                finding(
                    "shell.piped_script",
                    f"`{name}` runs the commands piped into it (`{stdin_text[:60]}`) as a "
                    "script (exec, high).",
                    RiskClass.EXEC,
                    Severity.HIGH,
                )
            )
        return traits, True
    return frozenset({INTERP}), False


_CODE_FLAGS = ("-c", "-e", "-E", "--eval", "-p", "--print", "-r")


def _script(name: str, script: str, st: ShellState) -> None:
    st.add(*check_path(script, st.cwd, st.rules, Access.WRITE, f"`{name}` running a script"))
    if normalise(script, st.cwd, st.rules.home) in st.downloaded:
        st.add(rules.runs_download(f"{name} {script}"))


# --------------------------------------------------------------------------- wrappers


def skip_options(args: list[Word], with_value: frozenset[str]) -> list[Word]:
    i = 0
    while i < len(args):
        v = args[i].text
        if v == "--":
            return args[i + 1 :]
        if not v.startswith("-") or v == "-":
            break
        i += 2 if v in with_value else 1
    return args[i:]


def _plain(opts: frozenset[str], positional: int = 0) -> rules.Wrapper:
    def unwrap(
        name: str, args: list[Word], st: ShellState, stdin_text: str | None
    ) -> frozenset[str]:
        rest = skip_options(args, opts)[positional:]
        if not rest:
            return _bare(name, args, st)
        return analyse_argv(rest, st, stdin_text)

    return unwrap


def _bare(name: str, args: list[Word], st: ShellState) -> frozenset[str]:
    base = Base.READ if name in ("time", "nice", "command", "builtin") else Base.EXEC
    base_class(base, [Word.of(name), *args], st, [])
    return frozenset()


def _env(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    rest = skip_options(args, frozenset({"-u", "--unset", "-C", "--chdir", "-S"}))
    split = _flag_value(args, ("-S", "--split-string"))
    if split is not None:
        return _nested(split, "The `env -S` text", st)
    for i, w in enumerate(args):
        unset = None
        if w.value in ("-u", "--unset") and i + 1 < len(args):
            unset = args[i + 1].text
        elif w.text.startswith("--unset="):
            unset = w.text.split("=", 1)[1]
        elif w.text.startswith("-u") and len(w.text) > 2 and not w.text.startswith("--"):
            unset = w.text[2:]
        if unset is not None and is_sensitive(unset):
            st.add(builtins.sensitive_assignment(unset, "unsets"))
    while rest and rest[0].value is not None and "=" in rest[0].value:
        var = rest[0].value.split("=", 1)[0]
        if is_sensitive(var, rest[0].value.split("=", 1)[1]):
            st.add(builtins.sensitive_assignment(var))
        rest = rest[1:]
    if not rest:
        st.add(rules.env_dump(f"{name} {shown(args)}".strip()))
        return frozenset()
    return analyse_argv(rest, st, stdin_text)


def _privileged(
    name: str, args: list[Word], st: ShellState, stdin_text: str | None
) -> frozenset[str]:
    st.add(rules.privileged_wrapper(name, args))
    rest = skip_options(
        args,
        frozenset(
            {"-u", "-g", "-U", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "--user", "--group"}
        ),
    )
    if name == "su":
        code = _flag_value(args, ("-c", "--command"))
        return _nested(code, "The `su -c` text", st) if code is not None else frozenset()
    if name == "chroot" and rest:
        rest = rest[1:]
    if not rest:
        return frozenset()
    return analyse_argv(rest, st, stdin_text)


def _timeout(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    rest = skip_options(args, frozenset({"-s", "-k", "--signal", "--kill-after"}))
    return analyse_argv(rest[1:], st, stdin_text) if len(rest) > 1 else _bare(name, args, st)


def _watch(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    rest = skip_options(args, frozenset({"-n", "--interval", "-d"}))
    if not rest:
        return _bare(name, args, st)
    if all(w.value is not None for w in rest):
        return _nested(Word.of(" ".join(w.text for w in rest)), "The `watch` command", st)
    return _nested(UNKNOWN_WORD, "The `watch` command", st)


def _xargs(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    from workflow.classify.fromdata import xargs  # fromdata builds on this module

    return xargs(name, args, st, stdin_text)


def _parallel(
    name: str, args: list[Word], st: ShellState, stdin_text: str | None
) -> frozenset[str]:
    from workflow.classify.fromdata import parallel

    return parallel(name, args, st, stdin_text)


def _find(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    from workflow.classify.fromdata import find

    return find(name, args, st, stdin_text)


def _command(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    if any(w.value is not None and w.value.startswith("-") and "p" in w.value for w in args[:3]):
        st.add(
            builtins.shell_feature(
                "shell.command_default_path",
                f"`command {shown(args)}` looks the program up in a default PATH of its own",
            )
        )
    if args and args[0].value not in ("-v", "-V"):
        return analyse_argv(skip_options(args, frozenset()), st, stdin_text)
    return _bare(name, args, st)


def _tracer(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> frozenset[str]:
    """strace/ltrace run the command they trace; `-o FILE` writes the trace (readers.py)."""
    out = _flag_value(args, ("-o", "--output"))
    if out is not None:
        st.add(
            option_writes(f"{name} {shown(args)}", name, f"-o {out.text}"),
            *check_path(out.approx, st.cwd, st.rules, Access.WRITE, f"`{name}`"),
        )
    opts = frozenset({"-o", "-e", "-p", "-s", "-E", "-u", "-P", "-a", "-b", "-I", "-X", "-O"})
    return _plain(opts)(name, args, st, stdin_text)


_WRAPPERS: dict[str, rules.Wrapper] = {
    "env": _env,
    "nohup": _plain(frozenset()),
    "time": _plain(frozenset({"-f", "-o"})),
    "nice": _plain(frozenset({"-n", "--adjustment"})),
    "ionice": _plain(frozenset({"-c", "-n", "-p", "-t"})),
    "stdbuf": _plain(frozenset({"-i", "-o", "-e"})),
    "setsid": _plain(frozenset()),
    "command": _command,
    "builtin": _plain(frozenset()),
    "exec": _plain(frozenset({"-a"})),
    "unbuffer": _plain(frozenset()),
    "caffeinate": _plain(frozenset({"-t", "-w"})),
    "strace": _tracer,
    "ltrace": _tracer,
    "flock": _plain(frozenset({"-w", "-E", "--timeout"}), positional=1),
    "timeout": _timeout,
    "gtimeout": _timeout,
    "xargs": _xargs,
    "parallel": _parallel,
    "watch": _watch,
    "find": _find,
    "sudo": _privileged,
    "doas": _privileged,
    "su": _privileged,
    "pkexec": _privileged,
    "run0": _privileged,
    "chroot": _privileged,
}
