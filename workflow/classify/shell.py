"""Shell command analysis (DESIGN §4 layer 6): parsed with tree-sitter-bash, never regexes on
raw text.

The walker visits every simple command wherever it sits (pipelines, lists, subshells, command
and process substitution, control flow, function bodies) and hands each, with quoting removed,
to `commands.analyse_argv`. Redirections are checked here. A tree with ERROR or MISSING nodes
is unparseable and fails closed; so does nesting (`bash -c "bash -c '…'"`) deeper than
`MAX_DEPTH`.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from functools import lru_cache

from tree_sitter import Node

from workflow.classify import builtins, commands
from workflow.classify.findings import Finding, finding
from workflow.classify.memo import per_object
from workflow.classify.parsing import MAX_COMMAND_BYTES as MAX_COMMAND_BYTES
from workflow.classify.parsing import (
    ansi_c,
    odd_text_finding,
    parse,
    parse_failure,
    problem,
    text_ok,
    unescape_dq,
    unescape_word,
)
from workflow.classify.parsing import text_of as _text
from workflow.classify.rules import env_dump
from workflow.classify.shellstate import (
    DECODE,
    DYNAMIC,
    FETCH,
    INTERP,
    MAX_ALTS,
    MAX_ARGV_WORDS,
    MAX_NESTING,
    MAX_WORK,
    Exhausted,
    ShellState,
    Template,
    Word,
    compile_template,
    is_sensitive,
    texts_of,
)
from workflow.classify.tables import ClassifierTables
from workflow.classify.targets import Access, check_path, normalise, path_rules
from workflow.classify.taxonomy import Category, RiskClass, Severity
from workflow.classify.textguard import odd_character

MAX_DEPTH = 6

_SECRET_VAR = re.compile(r"(?i)(secret|token|passw|api_?key|private_?key|credential|auth)")
#: An array subscript holding a command substitution (`a[$(id)]`), written as quoted data:
#: arithmetic (`$((n))`, `[[ n -eq 0 ]]`, `declare -i`), `[[ -v ]]`, indirect expansion and
#: `printf -v` evaluate such text as code when a variable holds it.
_SUBSCRIPT_CODE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[[^\]]*(?:\$\(|`)")
_SAFE_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_WORD_TYPES = frozenset(
    {
        "word",
        "string",
        "raw_string",
        "concatenation",
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
    }
)


class Walker:
    """Walks one parsed command line, adding findings to the state; returns traits."""

    def __init__(self, state: ShellState) -> None:
        self.st = state

    # ------------------------------------------------------------------ words

    def word(self, node: Node) -> Word:
        st = self.st  # charge() and enter(), inlined: this runs for every node
        st.work += 1
        if st.work > MAX_WORK or st.nesting >= MAX_NESTING:
            st.charge(0)
            st.enter()
        st.nesting += 1
        try:
            return self._word(node)
        finally:
            st.nesting -= 1

    def _word(self, node: Node) -> Word:
        t = node.type
        if t == "word" or t == "number":
            text = unescape_word(_text(node))
            return self._data(text)
        if t == "raw_string":
            return self._data(_text(node)[1:-1])
        if t == "ansi_c_string":
            return self._data(ansi_c(_text(node)[2:-1]))
        if t in ("string", "translated_string", "concatenation"):
            return self._join([self._part(c) for c in node.named_children], node)
        if t in ("simple_expansion", "expansion"):
            return self._expansion(node)
        if t in ("command_substitution", "process_substitution", "arithmetic_expansion"):
            traits = self.walk_children(node)
            inner = node.named_children
            # `$(echo ~/.ssh/id_rsa)`: the text a lone echo/printf prints is what it may give
            echoed = self._echoed(inner[0]) if t == "command_substitution" and inner else None
            if echoed is not None and len(inner) == 1:
                return Word(None, DYNAMIC, traits, (echoed.rstrip("\n"),))
            return Word(None, DYNAMIC, traits)
        traits = self.walk_children(node)
        return Word(None, _text(node) or DYNAMIC, traits)

    def _data(self, text: str) -> Word:
        """A static word; text that would run code if evaluated as a subscript fails closed."""
        if ("[" in text) and _SUBSCRIPT_CODE.search(text):
            self.st.add(
                builtins.shell_feature(
                    "shell.subscript_code",
                    f"The text `{text[:60]}` holds an array subscript with a command "
                    "substitution, which arithmetic and `[[ -v ]]` evaluate as code",
                )
            )
        return Word(text, text)

    def _part(self, node: Node) -> Word:
        if node.type == "string_content":
            return self._data(unescape_dq(_text(node)))
        return self.word(node)

    def _join(self, parts: list[Word], node: Node) -> Word:
        if node.type in ("string", "translated_string") and not node.named_children:
            return Word("", "")
        approx = "".join(p.approx for p in parts)
        traits = frozenset().union(*(p.traits for p in parts)) if parts else frozenset()
        static = all(p.value is not None for p in parts)
        alts: tuple[str, ...] = ()
        if any(p.alts for p in parts):
            variants = [""]
            for p in parts:
                variants = [v + t for v in variants for t in texts_of(p)][:MAX_ALTS]
            alts = tuple(v for v in variants if v != approx)
        return Word(approx if static else None, approx, traits, alts)

    def _expansion(self, node: Node) -> Word:
        names = [
            c for c in node.named_children if c.type in ("variable_name", "special_variable_name")
        ]
        if not names:  # `${arr[0]}`: the name sits in the subscript
            sub = next((c for c in node.named_children if c.type == "subscript"), None)
            names = [c for c in sub.named_children if c.type == "variable_name"] if sub else []
        name = _text(names[0]) if names else ""
        simple = node.type == "simple_expansion" or _text(node) == "${" + name + "}"
        traits: frozenset[str] = frozenset()
        defaults: list[str] = []
        if node.type == "expansion":
            traits, defaults = self._expansion_parts(node)
            self._expansion_operators(node, name)
        if name == "HOME" and simple:
            return Word(self.st.rules.home, self.st.rules.home)
        alts = [*self.st.values.get(name, ()), *defaults]
        if _SECRET_VAR.search(name):
            self.st.add(
                finding(
                    "shell.secret_variable",
                    f"The command expands `${name}`, which by its name holds a secret "
                    "(secret_access, high).",
                    RiskClass.EGRESS,
                    Severity.HIGH,
                    Category.SECRET_ACCESS,
                )
            )
        return Word(None, DYNAMIC, traits, tuple(alts[:MAX_ALTS]))

    _DEFAULT_OPERATORS = frozenset({":-", "-", ":=", "=", ":+", "+", ":?", "?"})

    def _expansion_parts(self, node: Node) -> tuple[frozenset[str], list[str]]:
        """The traits of what `${…}` holds, and the texts `${X:-word}` and its kin may
        produce. Each child is visited once (visiting twice would double per nesting level)."""
        traits: set[str] = set()
        after_operator: list[Word] | None = None
        for child in node.children:
            if child.type in self._DEFAULT_OPERATORS and after_operator is None:
                after_operator = []
            if not child.is_named:
                continue
            if child.type in _WORD_TYPES:
                w = self.word(child)
                traits |= w.traits
                if after_operator is not None:
                    after_operator.append(w)
            else:
                traits |= self.walk(child)
        if not after_operator:
            return frozenset(traits), []
        return frozenset(traits), texts_of(self._join(after_operator, node))

    def _expansion_operators(self, node: Node, name: str) -> None:
        """`${x@P}` runs the value as a prompt string; `${!x}` names the variable to expand at
        run time, evaluating any subscript in it: both evaluate data as code."""
        kinds = [c.type for c in node.children]
        if any(a == "@" and b == "P" for a, b in itertools.pairwise(kinds)):
            self.st.add(
                builtins.shell_feature(
                    "shell.prompt_expansion",
                    f"`${{{name}@P}}` expands a value as a prompt string, running the command "
                    "substitutions in it",
                )
            )
        if kinds[1:2] == ["!"] and "variable_name" in kinds and not {"*", "@"} & set(kinds):
            self.st.add(
                builtins.shell_feature(
                    "shell.indirect_expansion",
                    f"`${{!{name}}}` expands the variable whose name `{name}` holds at run time",
                )
            )

    # ------------------------------------------------------------------ structure

    def walk_children(self, node: Node) -> frozenset[str]:
        traits: set[str] = set()
        for child in node.named_children:
            traits |= self.walk(child)
        return frozenset(traits)

    def walk(self, node: Node, stdin_text: str | None = None) -> frozenset[str]:
        st = self.st  # charge() and enter(), inlined: this runs for every node
        st.work += 1
        if st.work > MAX_WORK or st.nesting >= MAX_NESTING:
            st.charge(0)
            st.enter()
        st.nesting += 1
        try:
            return self._walk(node, stdin_text)
        finally:
            st.nesting -= 1

    def _walk(self, node: Node, stdin_text: str | None) -> frozenset[str]:
        t = node.type
        if t == "command":
            return self.command(node, stdin_text)
        if t == "pipeline":
            return self.pipeline(node)
        if t == "redirected_statement":
            return self.redirected(node)
        if t == "variable_assignment":
            return self.assignment(node)
        if t == "declaration_command":
            return self.declaration(node)
        if t in _WORD_TYPES:
            return self.word(node).traits
        if t == "comment":
            return frozenset()
        if t in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            self.redirect(node)  # `$(< ~/.ssh/id_rsa)`: a redirection with no command
            return frozenset()
        if t == "function_definition":
            fname = node.child_by_field_name("name")
            self.st.add(
                builtins.shell_feature(
                    "shell.function_definition",
                    f"The command defines the function `{_text(fname) if fname else '?'}`, "
                    "which replaces any later command of that name",
                )
            )
        elif t == "unset_command":
            words = [
                Word.of(_text(c)) if c.type == "variable_name" else self.word(c)
                for c in node.named_children
            ]
            builtins.HANDLERS["unset"]("unset", words, self.st)
        elif t in ("for_statement", "select_statement"):
            var = node.child_by_field_name("variable")
            if var is not None and is_sensitive(_text(var)):
                self.st.add(builtins.sensitive_assignment(_text(var), "loops over"))
            if var is not None:
                values = node.children_by_field_name("value")
                self.st.remember(_text(var), [t for v in values for t in texts_of(self.word(v))])
        return self.walk_children(node)

    def assignment(self, node: Node) -> frozenset[str]:
        name_node = node.child_by_field_name("name")
        name = _text(name_node) if name_node else ""
        value = node.child_by_field_name("value")
        word = self.word(value) if value is not None else Word("", "")
        if is_sensitive(name.split("[", 1)[0], word.value):
            self.st.add(builtins.sensitive_assignment(name))
        if value is not None and value.type == "array":  # `a=(~/.ssh/*)`: each element
            elements = [self.word(c) for c in value.named_children]
            self.st.remember(name, [t for w in elements for t in texts_of(w)])
        else:
            self.st.remember(name, texts_of(word))
        return word.traits

    def command(self, node: Node, stdin_text: str | None) -> frozenset[str]:
        words: list[Word] = []
        traits: set[str] = set()
        for child in node.named_children:
            if child.type == "variable_assignment":
                traits |= self.assignment(child)
            elif child.type == "command_name":
                words.extend(self.word(c) for c in child.named_children)
            elif child.type in ("file_redirect", "herestring_redirect"):
                stdin_text = self.redirect(child) or stdin_text
            else:
                words.append(self.word(child))
        for w in words:
            traits |= w.traits
        traits -= {INTERP}
        own = commands.analyse_argv(words, self.st, stdin_text)
        return frozenset(traits | own)

    def pipeline(self, node: Node) -> frozenset[str]:
        stages = [c for c in node.named_children if c.type != "comment"]
        upstream: set[str] = set()
        result: set[str] = set()
        fed: str | None = None
        for stage in stages:
            traits = self.walk(stage, fed)
            fed = self._echoed(stage)
            if INTERP in traits and upstream & {FETCH, DECODE}:
                what = "downloads" if FETCH in upstream else "decodes"
                cats = "network, critical" if FETCH in upstream else "critical"
                self.st.add(
                    finding(
                        "shell.pipe_to_interpreter",
                        f"`{_text(node)[:80]}` {what} code and pipes it into an interpreter "
                        f"that executes it ({cats}).",
                        RiskClass.EXEC,
                        Severity.CRITICAL,
                        *((Category.NETWORK,) if FETCH in upstream else ()),
                    )
                )
            upstream |= traits
            result |= traits
        return frozenset(result)

    def _echoed(self, node: Node) -> str | None:
        """The static text an `echo`/`printf '%s'` stage writes, so `echo '…' | sh` is analysed."""
        if node.type != "command":
            return None
        name = node.child_by_field_name("name")
        if name is None or _text(name) not in ("echo", "printf"):
            return None
        args = [c for c in node.named_children if c.type != "command_name"]
        if any(c.type not in ("word", "raw_string", "string") for c in args):
            return None
        words = [self.word(c) for c in args]
        if any(w.value is None for w in words):
            return None
        values = [w.text for w in words]
        if _text(name) == "printf":
            # `printf FORMAT ARGS` repeats the format for each argument: only the two plain
            # formats are followed; any other format (escapes, `%b`...) is unknown text.
            if values[:1] == ["%s\\n"]:
                return "\n".join(values[1:])
            if values[:1] == ["%s"]:
                return "".join(values[1:])
            if len(values) == 1 and "%" not in values[0] and "\\" not in values[0]:
                return values[0]
            return None
        while values and values[0] in ("-n", "-e", "-E"):
            values = values[1:]
        text = " ".join(values)
        # echo interprets backslash escapes in some shells (dash, `-e`): unknown text.
        return None if "\\" in text else text

    def declaration(self, node: Node) -> frozenset[str]:
        """`export`/`declare`/`local`...: assignments are checked; a bare listing dumps the
        environment."""
        named = node.named_children
        if named and all(c.type == "word" and _text(c).startswith("-") for c in named):
            self.st.add(env_dump(_text(node)))
        keyword = _text(node.children[0]) if node.children else ""
        options = [_text(c) for c in named if c.type == "word" and _text(c)[:1] in "-+"]
        flags = {ch for option in options for ch in option[1:]}
        bare = [
            Word.of(_text(c)) if c.type == "variable_name" else self.word(c)
            for c in named
            if c.type in ("variable_name", "word", "string", "raw_string", "simple_expansion")
            and _text(c)[:1] not in "-+"
        ]
        targets = len(bare) + sum(c.type == "variable_assignment" for c in named)
        builtins.declaration(keyword, flags, bare, targets, self.st)
        return self.walk_children(node)

    def redirected(self, node: Node) -> frozenset[str]:
        body = node.child_by_field_name("body")
        stdin_text: str | None = None
        traits: set[str] = set()
        for child in node.named_children:
            if child is body or (body is not None and child.id == body.id):
                continue
            if child.type in ("file_redirect", "herestring_redirect", "heredoc_redirect"):
                stdin_text = self.redirect(child) or stdin_text
            else:
                traits |= self.walk(child)
        if body is not None:
            traits |= self.walk(body, stdin_text)
        return frozenset(traits)

    def redirect(self, node: Node) -> str | None:
        """Checks one redirection; returns text it feeds to standard input, if static."""
        if node.type == "herestring_redirect":
            targets = [self.word(c) for c in node.named_children]
            return targets[-1].value if targets else None
        if node.type == "heredoc_redirect":
            bodies = [c for c in node.named_children if c.type == "heredoc_body"]
            for b in bodies:
                self.walk_children(b)
            return _text(bodies[0]) if bodies else None
        op = next((_text(c) for c in node.children if not c.is_named), ">")
        dest_nodes = [c for c in node.named_children if c.type != "file_descriptor"]
        if not dest_nodes:
            return None
        dest = self.word(dest_nodes[0])
        if (op in (">&", "<&", ">&-", "<&-") and dest.text.isdigit()) or dest.text == "-":
            return None
        self._redirect_target(op, dest)
        return None

    def _redirect_target(self, op: str, dest: Word) -> None:
        text = dest.text
        if text.startswith(("/dev/tcp/", "/dev/udp/")):
            self.st.add(
                finding(
                    "shell.dev_tcp",
                    f"The command opens a raw network connection through `{text}` (a common "
                    "reverse-shell trick) (network, critical).",
                    RiskClass.EXEC,
                    Severity.CRITICAL,
                    Category.NETWORK,
                )
            )
            return
        if text in _SAFE_SINKS:
            return
        reading = op in ("<", "<<<")
        access = Access.READ if reading else Access.WRITE
        via = "An input redirection" if reading else f"The redirection `{op} {text}`"
        for candidate in (dest.approx, *dest.alts):
            self.st.add(*check_path(candidate, self.st.cwd, self.st.rules, access, via))
        if not reading:
            self.st.add(
                finding(
                    "shell.redirect_write",
                    f"The redirection `{op} {text}` writes to a file (write_local, medium).",
                    RiskClass.WRITE_LOCAL,
                    Severity.MEDIUM,
                )
            )


def analyse_source(source: str, label: str, state: ShellState) -> frozenset[str]:
    """Parse and walk one shell source (a command line or a nested `-c` string)."""
    if state.depth > MAX_DEPTH:
        state.add(
            parse_failure(
                f"{label} nests shells more than {MAX_DEPTH} levels deep; it cannot be analysed "
                "and fails closed (critical)."
            )
        )
        return frozenset()
    data = source.encode("utf-8", "surrogatepass")
    if len(data) > MAX_COMMAND_BYTES:
        state.add(
            parse_failure(f"{label} is longer than {MAX_COMMAND_BYTES} bytes; it fails closed.")
        )
        return frozenset()
    if not text_ok(source, label, state):
        return frozenset()
    tree = parse(data).root_node
    if tree.has_error:
        state.add(
            parse_failure(
                f"{label} cannot be parsed ({problem(tree)}); an unparseable command fails "
                "closed (critical)."
            )
        )
        return frozenset()
    state.depth += 1
    try:
        return Walker(state).walk(tree)
    finally:
        state.depth -= 1


_parse = parse  # the name command grants (`simple.py`) import

_POSIX_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "ash", "mksh", "busybox"})


@lru_cache(maxsize=16)
def _templates(sources: tuple[str, ...]) -> tuple[Template, ...]:
    return tuple(compile_template(s) for s in sources)


def _nested(source: str, label: str, state: ShellState) -> frozenset[str]:
    return analyse_source(source, label, state)


@per_object
def _shell_tables(
    tables: ClassifierTables,
) -> tuple[tuple[str, ...], tuple[Template, ...], tuple[Template, ...]]:
    """The trusted hosts and the compiled command templates, built once per tables object."""
    return (
        tuple(tables.trusted_hosts),
        _templates(tuple(tables.read_command_templates)),
        _templates(tuple(tables.exec_command_templates)),
    )


def new_state(cwd: str | None, tables: ClassifierTables) -> ShellState:
    rules = path_rules(tables)
    trusted, read_templates, exec_templates = _shell_tables(tables)
    return ShellState(
        rules=rules,
        trusted=trusted,
        read_templates=read_templates,
        exec_templates=exec_templates,
        cwd=normalise(cwd, None, rules.home) if cwd else None,
        nested=_nested,
    )


def command_findings(
    command: str | list[str], cwd: str | None, shell: str | None, tables: ClassifierTables
) -> list[Finding]:
    """Findings for a shell command (a string for a shell, or an argv list run directly)."""
    return analyse_command(command, shell, new_state(cwd, tables)).findings


def analyse_command(command: str | list[str], shell: str | None, state: ShellState) -> ShellState:
    """Analyses `command` into `state`, within the bounds on work (`state.work` counts it)."""
    try:
        _analyse_command(command, shell, state)
    except Exhausted as exhausted:
        state.add(_too_much_work(exhausted.why))
    except RecursionError:  # a safety net under the nesting bound, never expected
        state.add(_too_much_work("nests too deeply"))
    return state


def _too_much_work(why: str) -> Finding:
    return finding(
        "shell.too_much_work",
        f"The command {why}; the analysis stopped there, so it fails closed (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        fail_closed=True,
    )


def _analyse_command(command: str | list[str], shell: str | None, state: ShellState) -> None:
    if isinstance(command, list):
        if len(command) > MAX_ARGV_WORDS:
            raise Exhausted(f"has more than {MAX_ARGV_WORDS} words")
        if sum(len(w) for w in command) > MAX_COMMAND_BYTES:
            raise Exhausted(f"is longer than {MAX_COMMAND_BYTES} characters")
        odd = next((c for c in map(odd_character, command) if c is not None), None)
        if odd is not None:
            state.add(odd_text_finding(odd, "The command"))
            return
        commands.analyse_argv([Word.of(w) for w in command], state)
        return
    shell_name = posixpath.basename(shell) if shell else None
    if shell_name is not None and shell_name not in _POSIX_SHELLS:
        state.add(
            finding(
                "shell.unsupported_shell",
                f"The command runs under `{shell}`, whose syntax the analyser does not parse; "
                "it fails closed (exec, high).",
                RiskClass.EXEC,
                Severity.HIGH,
                fail_closed=True,
            )
        )
        return
    if not command.strip():
        state.add(
            finding(
                "shell.empty",
                "The command is empty; there is nothing to analyse, so it fails closed "
                "(exec, high).",
                RiskClass.EXEC,
                Severity.HIGH,
                fail_closed=True,
            )
        )
        return
    analyse_source(command, "The command", state)
