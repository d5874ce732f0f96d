"""Shell builtins and features that change what later words run, read or log (issue 18).

A command line is analysed word by word, in order; a builtin that redefines a later word
(an alias, a function, `hash -p`), sets a variable a later program obeys (`printf -v PATH`,
`read PAGER`, `declare -n ref=PATH`), changes how words expand (`set -f`, `shopt -s dotglob`)
or tampers with the shell's history defeats that analysis. Each fails closed like `PATH=…`.
Every check only adds findings; the base class of the command is decided as before.
"""

from __future__ import annotations

from collections.abc import Callable

from workflow.classify.findings import Finding, finding
from workflow.classify.shellstate import ShellState, Word, is_sensitive, shown, texts_of
from workflow.classify.taxonomy import RiskClass, Severity


def shell_feature(rule: str, what: str) -> Finding:
    """A fail-closed finding for a feature that changes what later words do."""
    return finding(
        rule,
        f"{what}, which changes what later words run or read, so the analysis cannot vouch "
        "for the rest of the line; it fails closed (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        fail_closed=True,
    )


def sensitive_assignment(name: str, how: str = "sets") -> Finding:
    return finding(
        "shell.sensitive_variable",
        f"The command {how} `{name}`, which changes which programs run, what they load or "
        "what the shell records, so the analysis cannot vouch for it (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        fail_closed=True,
    )


def check_names(names: list[Word], st: ShellState, how: str) -> None:
    """Variables a builtin sets or unsets: a sensitive or unknown name fails closed."""
    for w in names:
        if w.value is None:
            st.add(
                shell_feature(
                    "shell.dynamic_variable",
                    f"The command {how} a variable whose name is only known at run time",
                )
            )
        elif is_sensitive(w.value.split("[", 1)[0]):
            st.add(sensitive_assignment(w.value, how))


def _operands(args: list[Word], with_value: frozenset[str]) -> tuple[list[Word], list[Word]]:
    """(options with their values, operands) of a builtin's short options."""
    opts: list[Word] = []
    i = 0
    while i < len(args):
        v = args[i].text
        if v == "--":
            return opts, args[i + 1 :]
        if not v.startswith(("-", "+")) or v in ("-", "+"):
            break
        opts.append(args[i])
        if v in with_value and i + 1 < len(args):
            opts.append(args[i + 1])
            i += 1
        i += 1
    return opts, args[i:]


def _flags(opts: list[Word]) -> set[str]:
    return {c for w in opts if w.text[:1] in "-+" for c in w.text[1:]}


_SAFE_SET_FLAGS = frozenset("euxvECnbhT")
_SAFE_SET_OPTIONS = frozenset(
    {"errexit", "nounset", "xtrace", "verbose", "pipefail", "errtrace", "noclobber", "functrace"}
)


def _set(name: str, args: list[Word], st: ShellState) -> None:
    i = 0
    while i < len(args):
        v = args[i].text
        if v in ("--", "-", "+") or not v.startswith(("-", "+")):
            return  # the rest are positional parameters: data
        odd = set(v[1:]) - _SAFE_SET_FLAGS - {"o"}
        if odd:
            st.add(
                shell_feature(
                    "shell.set_option",
                    f"`set {v}` changes how the shell expands or records later words",
                )
            )
        if "o" in v[1:]:  # `set -euo pipefail`: the option name follows
            option = args[i + 1].value if i + 1 < len(args) else ""
            if option and option not in _SAFE_SET_OPTIONS:
                st.add(
                    shell_feature(
                        "shell.set_option",
                        f"`set {v} {option}` changes a "
                        "shell option (expansion, history or logging)",
                    )
                )
            i += 1
        i += 1


def _shopt(name: str, args: list[Word], st: ShellState) -> None:
    opts, names = _operands(args, frozenset())
    flags = _flags(opts)
    if flags & {"s", "u"} and names and not flags & {"p", "q"}:
        st.add(
            shell_feature(
                "shell.shopt",
                f"`{shown([Word.of(name), *args])}` changes a shell "
                "option (globbing, aliases or history)",
            )
        )


def _history(name: str, args: list[Word], st: ShellState) -> None:
    opts, _ = _operands(args, frozenset({"-d"}))
    if _flags(opts) & set("cdanrwps"):
        st.add(
            shell_feature(
                "shell.history_tampering",
                f"`{shown([Word.of(name), *args])}` clears or rewrites the shell's history",
            )
        )


def _defines(rule: str, what: str) -> Callable[[str, list[Word], ShellState], None]:
    """`alias x=…`, `trap CMD SIG`, `enable -f lib x`: anything past a listing fails closed."""

    def check(name: str, args: list[Word], st: ShellState) -> None:
        opts, operands = _operands(args, frozenset({"-f"}))
        listing = not operands and _flags(opts) <= {"p", "l", "a", "s"}
        if name == "alias":
            listing = all(w.value is not None and "=" not in w.value for w in operands)
        if not listing:
            st.add(shell_feature(rule, f"`{shown([Word.of(name), *args])}` {what}"))
        if name == "trap" and operands and operands[0].value:
            st.nested(operands[0].value, "The `trap` handler", st)

    return check


def _hash(name: str, args: list[Word], st: ShellState) -> None:
    opts, _ = _operands(args, frozenset({"-p"}))
    if _flags(opts) & {"p", "d"}:
        st.add(
            shell_feature(
                "shell.hash_path",
                f"`{shown([Word.of(name), *args])}` makes a command name run another file",
            )
        )


def _printf(name: str, args: list[Word], st: ShellState) -> None:
    if args and args[0].value == "-v" and len(args) > 1:
        check_names([args[1]], st, "assigns through `printf -v`")
        fmt = args[2].text if len(args) > 2 else ""
        if fmt in ("%s", "%s\\n") and len(args) > 3:
            st.remember(args[1].text, texts_of(args[3]))
        elif "%" not in fmt and len(args) > 2:
            st.remember(args[1].text, texts_of(args[2]))


def remember_read(args: list[Word], stdin_text: str | None, st: ShellState) -> None:
    """`read -r f <<< ~/.ssh/id_rsa`: the names read take the text fed to `read`."""
    if stdin_text is None:
        return
    _, names = _operands(args, frozenset({"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"}))
    for w in names[:1]:
        st.remember(w.text, [stdin_text.strip()])


def _read(name: str, args: list[Word], st: ShellState) -> None:
    with_value = frozenset({"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"})
    opts, names = _operands(args, with_value)
    arrays = [opts[i + 1] for i, w in enumerate(opts[:-1]) if w.value == "-a"]
    check_names([*names, *arrays], st, "reads input into")


def _mapfile(name: str, args: list[Word], st: ShellState) -> None:
    opts, names = _operands(args, frozenset({"-d", "-n", "-O", "-s", "-u", "-C", "-c"}))
    check_names(names[-1:], st, "reads input into")
    if "C" in _flags(opts):
        st.add(
            shell_feature(
                "shell.mapfile_callback", f"`{name} -C` runs a command for every few lines it reads"
            )
        )


def _compgen(name: str, args: list[Word], st: ShellState) -> None:
    opts, _ = _operands(args, frozenset({"-C", "-F", "-G", "-W", "-X", "-P", "-S", "-A", "-o"}))
    if _flags(opts) & {"C", "F"}:
        st.add(
            shell_feature(
                "shell.compgen_command",
                f"`{shown([Word.of(name), *args])}` runs "
                "a command or a function to list completions",
            )
        )


def _fc(name: str, args: list[Word], st: ShellState) -> None:
    opts, _ = _operands(args, frozenset({"-e"}))
    if not _flags(opts) & {"l"} or _flags(opts) & {"e", "s"}:
        st.add(
            shell_feature(
                "shell.history_rerun",
                f"`{shown([Word.of(name), *args])}` runs commands again from the shell's history",
            )
        )


def _getopts(name: str, args: list[Word], st: ShellState) -> None:
    check_names(args[1:2], st, "assigns through `getopts`")


def _unset(name: str, args: list[Word], st: ShellState) -> None:
    opts, names = _operands(args, frozenset())
    if "f" not in _flags(opts):
        check_names(names, st, "unsets")


HANDLERS: dict[str, Callable[[str, list[Word], ShellState], None]] = {
    "set": _set,
    "shopt": _shopt,
    "history": _history,
    "alias": _defines("shell.alias", "defines an alias that replaces a later command"),
    "trap": _defines("shell.trap", "installs a handler that runs code on a signal or exit"),
    "enable": _defines("shell.enable", "loads or disables shell builtins"),
    "hash": _hash,
    "printf": _printf,
    "read": _read,
    "mapfile": _mapfile,
    "readarray": _mapfile,
    "getopts": _getopts,
    "compgen": _compgen,
    "fc": _fc,
    "unset": _unset,
}


def declaration(
    keyword: str, flags: set[str], names: list[Word], targets: int, st: ShellState
) -> None:
    """`export`/`declare`/`typeset`/`local`/`readonly`: functions passed to children,
    namerefs, and sensitive variables named without a value (their value was set earlier)."""
    if "f" in flags and (keyword == "export" or "x" in flags):
        st.add(
            shell_feature(
                "shell.export_function",
                f"`{keyword} -f` passes a function to child shells, where it replaces a command",
            )
        )
    if "n" in flags and targets:
        st.add(
            shell_feature(
                "shell.nameref",
                f"`{keyword} -n` makes a name refer to another "
                "variable, so an assignment can set any variable",
            )
        )
    if "p" not in flags and "f" not in flags:
        check_names(names, st, f"declares with `{keyword}`")
