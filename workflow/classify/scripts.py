"""Program text given to readers: awk programs, sed scripts and jq filters.

`awk` runs commands (`system()`, `print | "cmd"`, `"cmd" | getline`), writes files
(`print > "f"`) and reads the environment (`ENVIRON`); `sed` runs commands (`e`, `s///e`),
writes (`w`, `W`, `s///w`) and reads (`r`, `R`) files; `jq` reads the environment (`env`,
`$ENV`). Each is lexed far enough to tell these apart from text that only looks like them (a
comparison `length > 120`, a regex `/system\\(/`, an address `/e id/`). Text that cannot be
lexed fails closed.
"""

from __future__ import annotations

import re

from workflow.classify.findings import Finding, finding
from workflow.classify.grammar import Parsed
from workflow.classify.rules import env_dump
from workflow.classify.shellstate import ShellState, Word
from workflow.classify.targets import Access, check_path
from workflow.classify.taxonomy import Category, RiskClass, Severity


def program_runs(name: str, what: str) -> Finding:
    return finding(
        "scripts.runs_command",
        f"The `{name}` program {what}, which runs a command (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
    )


def program_writes(name: str, what: str) -> Finding:
    return finding(
        "scripts.writes_file",
        f"The `{name}` program {what}, which writes a file (write_local, medium).",
        RiskClass.WRITE_LOCAL,
        Severity.MEDIUM,
    )


def program_unknown(name: str, why: str) -> Finding:
    return finding(
        "scripts.not_analysed",
        f"The `{name}` program {why}, so what it does is not known (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
    )


def program_connects(name: str) -> Finding:
    return finding(
        "scripts.network_file",
        f"The `{name}` program opens a network special file (/inet/...) (network, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        Category.NETWORK,
    )


# --------------------------------------------------------------------------- awk

_AWK_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r]+|\\\n)
  | (?P<newline>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)
  | (?P<name>@?[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>\|\||\|&|\||>>|>=|>|<=|<|&&|==|!=|!~|\+\+|--|[-+*/%^]=|[-+*/%^!~?:,;=(){}\[\]$])
    """,
    re.VERBOSE | re.DOTALL,
)
_AWK_OPERAND_END = frozenset({")", "]", "$"})
_AWK_KEYWORDS = frozenset(
    {"print", "printf", "return", "in", "getline", "if", "while", "for", "do", "else"}
)
#: Environment variables whose value is no secret: `ENVIRON["HOME"]` is not a dump.
_PLAIN_ENV = frozenset({"HOME", "USER", "LOGNAME", "PWD", "SHELL", "LANG", "TERM", "TMPDIR"})


def awk_tokens(program: str) -> list[tuple[str, str]] | None:
    """(kind, text) tokens of an awk program; regex literals become ("regex", text).
    None when the program does not lex."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(program)
    while i < n:
        if program[i] == "/" and _regex_allowed(out):
            j = i + 1
            in_bracket = False
            while j < n and (program[j] != "/" or in_bracket):
                if program[j] == "\\":
                    j += 1
                elif program[j] == "[":
                    in_bracket = True
                elif program[j] == "]":
                    in_bracket = False
                elif program[j] == "\n":
                    return None
                j += 1
            if j >= n:
                return None
            out.append(("regex", program[i : j + 1]))
            i = j + 1
            continue
        m = _AWK_TOKEN.match(program, i)
        if m is None:
            return None
        kind = m.lastgroup or ""
        if kind not in ("space", "comment"):
            out.append((kind, m.group()))
        i = m.end()
    return out


def _regex_allowed(prev: list[tuple[str, str]]) -> bool:
    if not prev:
        return True
    kind, text = prev[-1]
    if kind in ("number", "string", "regex"):
        return False
    if kind == "name":
        return text in _AWK_KEYWORDS
    return text not in _AWK_OPERAND_END


def _awk_target(tokens: list[tuple[str, str]], home: str) -> str | None:
    """The file a redirection names when it is made of string literals and ENVIRON["HOME"]."""
    parts: list[str] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        if text in ("(", ")"):
            i += 1
        elif kind == "string":
            parts.append(text[1:-1])
            i += 1
        elif text == "ENVIRON" and [t for _, t in tokens[i + 1 : i + 4]] == ["[", '"HOME"', "]"]:
            parts.append(home)
            i += 4
        else:
            return None
    return "".join(parts) if parts else None


def _statement_end(tokens: list[tuple[str, str]], start: int) -> int:
    depth = 0
    for j in range(start, len(tokens)):
        kind, text = tokens[j]
        if text in ("(", "["):
            depth += 1
        elif text in (")", "]"):
            if depth == 0:
                return j
            depth -= 1
        elif depth == 0 and (kind == "newline" or text in (";", "}", "{")):
            return j
    return len(tokens)


def _awk_redirects(
    name: str, tokens: list[tuple[str, str]], st: ShellState, out: list[Finding]
) -> None:
    """`print ... > target` / `>> target` at the statement's own level: a write."""
    i = 0
    while i < len(tokens):
        if tokens[i][1] not in ("print", "printf"):
            i += 1
            continue
        end = _statement_end(tokens, i + 1)
        depth = 0
        for j in range(i + 1, end):
            text = tokens[j][1]
            depth += text in ("(", "[")
            depth -= text in (")", "]")
            if depth == 0 and text in (">", ">>"):
                target = _awk_target(tokens[j + 1 : end], st.rules.home)
                out.append(program_writes(name, f"redirects `print` with `{text}`"))
                if target is None:
                    out.append(
                        finding(
                            "scripts.write_unknown_file",
                            f"The `{name}` program writes to a file named at run time, which "
                            "could be any file (write_local, high).",
                            RiskClass.WRITE_LOCAL,
                            Severity.HIGH,
                        )
                    )
                else:
                    out.extend(
                        check_path(target, st.cwd, st.rules, Access.WRITE, f"The `{name}` program")
                    )
                break
        i = end


def _awk_environ(tokens: list[tuple[str, str]], i: int) -> bool:
    """True when the ENVIRON at `i` reads more than one plain, named variable."""
    nxt = [t for _, t in tokens[i + 1 : i + 4]]
    return not (len(nxt) == 3 and nxt[0] == "[" and nxt[2] == "]" and nxt[1][1:-1] in _PLAIN_ENV)


def _getline_file(tokens: list[tuple[str, str]], i: int) -> int | None:
    """For `getline [var] < file` at `i`: the index where the file expression starts."""
    j = i + 1
    if j < len(tokens) and tokens[j][0] == "name" and tokens[j][1] not in _AWK_KEYWORDS:
        j += 1
    return j + 1 if j < len(tokens) and tokens[j][1] == "<" else None


def _awk_command(name: str, tokens: list[tuple[str, str]], st: ShellState) -> None:
    """A command written as a string literal (`system("curl … | sh")`, `print | "sh"`) is
    analysed as shell text, so what it runs counts too."""
    if tokens and tokens[0][0] == "string":
        st.nested(tokens[0][1][1:-1].replace('\\"', '"'), f"The `{name}` command string", st)


def awk_findings(name: str, program: str, st: ShellState) -> list[Finding]:
    tokens = awk_tokens(program)
    if tokens is None:
        return [program_unknown(name, "does not lex")]
    out: list[Finding] = []
    for i, (kind, text) in enumerate(tokens):
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "name" and text == "system" and nxt == "(":
            out.append(program_runs(name, "calls `system()`"))
            _awk_command(name, tokens[i + 2 : i + 4], st)
        elif text in ("|", "|&"):
            out.append(program_runs(name, f"pipes with `{text}`"))
            _awk_command(name, tokens[i + 1 : i + 2], st)
            _awk_command(name, tokens[max(i - 1, 0) : i], st)
        elif kind == "name" and text in ("@load", "@include", "@namespace"):
            out.append(program_runs(name, f"uses `{text}`"))
        elif kind == "name" and text == "getline" and _getline_file(tokens, i) is not None:
            start = _getline_file(tokens, i) or 0
            target = _awk_target(tokens[start : _statement_end(tokens, start)], st.rules.home)
            if target is None:
                out.append(program_unknown(name, "reads with `getline` a file named at run time"))
            else:
                out.extend(check_path(target, st.cwd, st.rules, Access.READ, f"`{name}`"))
        elif kind == "name" and text in ("ENVIRON", "PROCINFO") and _awk_environ(tokens, i):
            out.append(env_dump(f"{name} … {text}"))
        elif kind == "string" and text[1:].startswith("/inet"):
            out.append(program_connects(name))
    _awk_redirects(name, tokens, st, out)
    return out


def awk_program(name: str, texts: list[Word], parsed: Parsed, st: ShellState) -> list[Finding]:
    """The awk program is an operand, or given with `-e`/`--source` (gawk); `-f`/`-E` name a
    file the classifier does not see (their options are exec in the grammar)."""
    out: list[Finding] = []
    for lib in parsed.values("-i", "--include"):
        if lib.value in ("inplace", "inplace.awk"):
            out.append(program_writes(name, "is loaded with `-i inplace`"))
            out.extend(
                f
                for w in parsed.operands[1:]
                for f in check_path(w.approx, st.cwd, st.rules, Access.WRITE, f"`{name}`")
            )
        else:
            out.append(program_unknown(name, f"includes `{lib.text}`, a file not analysed"))
    if parsed.has("-f", "--file", "-E", "--exec"):
        return out
    if not texts:
        return [*out, program_unknown(name, "is missing or comes from a file")]
    for text in texts:
        if text.value is None:
            out.append(program_unknown(name, "is only known at run time"))
        else:
            out.extend(awk_findings(name, text.value, st))
    return out


# --------------------------------------------------------------------------- ps

_BSD_OPTIONS = re.compile(r"^[A-Za-z]*e[A-Za-z]*$")


def ps_options(name: str, texts: list[Word], parsed: Parsed, st: ShellState) -> list[Finding]:
    """ps's BSD-style options have no dash; `e` among them prints each process's
    environment (`ps eww`, `ps aeux`)."""
    if any(w.value is not None and _BSD_OPTIONS.match(w.value) for w in parsed.operands):
        return [env_dump(f"{name} {' '.join(w.text for w in parsed.operands)}")]
    return []


# --------------------------------------------------------------------------- sed


class _SedError(ValueError):
    pass


def _sed_regex(s: str, i: int, delim: str) -> int:
    """Index just past the closing `delim` of a regex or replacement starting at `i`."""
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == delim:
            return i + 1
        if c == "\n" and delim != "\n":
            raise _SedError("newline in a regex")
        i += 1
    raise _SedError("unterminated regex")


def _sed_address(s: str, i: int) -> int:
    def one(i: int) -> int:
        if i < len(s) and s[i] in "+~" and i + 1 < len(s) and s[i + 1].isdigit():
            i += 1
        if i < len(s) and s[i].isdigit():
            while i < len(s) and (s[i].isdigit() or s[i] == "~"):
                i += 1
        elif i < len(s) and s[i] == "$":
            i += 1
        elif i < len(s) and s[i] == "/":
            i = _sed_regex(s, i + 1, "/")
        elif i + 1 < len(s) and s[i] == "\\":
            i = _sed_regex(s, i + 2, s[i + 1])
        else:
            return i
        while i < len(s) and s[i] in "IM":
            i += 1
        return i

    i = one(i)
    if i < len(s) and s[i] == ",":
        i = one(i + 1)
    return i


def _to_line_end(s: str, i: int) -> tuple[str, int]:
    j = s.find("\n", i)
    j = len(s) if j < 0 else j
    return s[i:j], j


_LABEL = re.compile(r"[^;\n]*")


def _sed_substitute(s: str, i: int, c: str, out: list[tuple[str, str]]) -> int:
    """Past an `s/re/repl/flags` or `y/src/dst/` command starting at its delimiter `i`."""
    if i >= len(s) or s[i] in "\n\\":
        raise _SedError("bad delimiter")
    delim = s[i]
    i = _sed_regex(s, _sed_regex(s, i + 1, delim), delim)
    if c == "y":
        return i
    flags_start = i
    while i < len(s) and (s[i] in "gpiImMe" or s[i].isdigit()):
        i += 1
    if "e" in s[flags_start:i]:
        out.append(("s///e", ""))
    if i < len(s) and s[i] == "w":
        arg, i = _to_line_end(s, i + 1)
        out.append(("s///w", arg.strip()))
    return i


def _sed_one(s: str, c: str, i: int, out: list[tuple[str, str]]) -> int:
    """Past the arguments of command `c`, whose arguments start at `i`."""
    if c in ":btTv":  # a label ends at a newline or (GNU) a semicolon
        m = _LABEL.match(s, i)
        return m.end() if m else i
    if c in "aic":  # text up to the end of the line
        while i < len(s) and s[i] != "\n":
            i += 2 if s[i] == "\\" else 1
        return i
    if c in "rRwWe":
        arg, i = _to_line_end(s, i)
        out.append((c, arg.strip()))
        return i
    if c in "lLqQ":
        while i < len(s) and (s[i].isdigit() or s[i] in " \t"):
            i += 1
        return i
    if c in "=dDgGhHnNpPxzF{}":
        return i
    if c in "sy":
        return _sed_substitute(s, i, c, out)
    raise _SedError(f"unknown command {c!r}")


def _sed_commands(s: str) -> list[tuple[str, str]]:
    """(command, argument) for every command of a sed script that runs, writes or reads."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c in " \t\n;{}!":
            i += 1
            continue
        if c == "#":
            i = _to_line_end(s, i)[1]
            continue
        j = _sed_address(s, i)
        while j < len(s) and s[j] in " \t!":
            j += 1
        if j >= len(s):
            raise _SedError("address without a command")
        i = _sed_one(s, s[j], j + 1, out)
    return out


_SED_STD = frozenset({"/dev/stdout", "/dev/stderr"})


def sed_findings(name: str, script: str, st: ShellState) -> list[Finding]:
    try:
        commands = _sed_commands(script)
    except _SedError as err:
        return [program_unknown(name, f"does not parse ({err})")]
    out: list[Finding] = []
    for cmd, arg in commands:
        if cmd in ("e", "s///e"):
            out.append(program_runs(name, f"uses the `{cmd}` command"))
        elif cmd in ("w", "W", "s///w") and arg not in _SED_STD:
            out.append(program_writes(name, f"uses `{cmd} {arg}`"))
            out.extend(check_path(arg, st.cwd, st.rules, Access.WRITE, f"The `{name}` script"))
        elif cmd in ("r", "R") and arg:
            out.extend(check_path(arg, st.cwd, st.rules, Access.READ, f"The `{name}` script"))
    return out


def sed_program(name: str, texts: list[Word], parsed: Parsed, st: ShellState) -> list[Finding]:
    if parsed.has("-f", "--file"):
        return []
    if parsed.has("--sandbox"):
        return []  # GNU sed rejects e, r and w in sandbox mode
    if not texts:
        return [program_unknown(name, "is missing")]
    out: list[Finding] = []
    for text in texts:
        if text.value is None:
            out.append(program_unknown(name, "is only known at run time"))
        else:
            out.extend(sed_findings(name, text.value, st))
    return out


# --------------------------------------------------------------------------- jq

_JQ_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JQ_ENV = re.compile(r"\$ENV\b|(?<![\w$.])env\b")


def jq_program(name: str, texts: list[Word], parsed: Parsed, st: ShellState) -> list[Finding]:
    """jq cannot run programs or write files; its filter can print the environment."""
    if parsed.has("-f", "--from-file"):
        return [program_unknown(name, "comes from a file the classifier does not see")]
    out: list[Finding] = []
    for text in texts:
        if text.value is None:
            out.append(program_unknown(name, "is only known at run time"))
        elif _JQ_ENV.search(_JQ_STRING.sub('""', text.value)):
            out.append(env_dump(f"{name} {text.value}"))
    return out


# --------------------------------------------------------------------------- yq

_YQ_ENV = re.compile(r"\b(?:str)?env\s*\(|\$ENV\b|(?<![\w$.])env\b")
_YQ_LOAD = re.compile(r"\bload(?:_str|_xml|_props|_base64)?\s*\(")


def yq_program(name: str, texts: list[Word], parsed: Parsed, st: ShellState) -> list[Finding]:
    """yq cannot run programs; its expression can print the environment (`env(X)`,
    `strenv(X)`, `$ENV`) and read other files (`load("f")`). The expression may follow an
    `eval`/`eval-all` subcommand, so every operand is looked at."""
    out: list[Finding] = []
    for text in [*texts, *parsed.operands]:
        if text.value is None:
            out.append(program_unknown(name, "is only known at run time"))
        elif _YQ_ENV.search(text.value):
            out.append(env_dump(f"{name} {text.value}"))
        elif _YQ_LOAD.search(text.value):
            out.append(program_unknown(name, "loads a file named in the expression"))
    return out
