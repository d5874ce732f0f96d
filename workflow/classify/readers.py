"""Readers: commands that only print, judged by their option grammar (DESIGN §4 layer 6).

`read_command` parses a reader's words with its grammar (`grammar.py`), reports every option
that runs a program, writes, connects, changes the system or prints the environment, checks the
program text of `awk`/`sed`/`jq` (`scripts.py`), and sends the files it reads and writes through
the path rules. Only what is left is a read.

Operands are of three kinds: `paths` (files it reads: checked as reads of protected paths),
`names` (it looks at names and metadata only, never at contents: `ls`, `stat`, `du`), and
`data` (text: `echo`, `tr`, `seq`). A reader's leading `text` operands are its program or
pattern (`grep PATTERN FILE`, `awk PROGRAM FILE`) unless an option gave it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from workflow.classify.findings import Finding, finding
from workflow.classify.grammar import Effect, Grammar, Parsed, effects_of, parse
from workflow.classify.rules import env_dump
from workflow.classify.shellstate import DECODE, ShellState, Word, shown
from workflow.classify.targets import Access, check_path
from workflow.classify.taxonomy import Category, RiskClass, Severity

Result = tuple[str | None, frozenset[str], list[Word] | None]
#: Checks a reader's program text; returns findings and whether the text is understood.
ProgramCheck = Callable[[str, list[Word], Parsed, ShellState], list[Finding]]


@dataclass(frozen=True)
class Reader:
    grammar: Grammar
    operands: str = "paths"
    text: int = 0
    text_options: frozenset[str] = frozenset()
    #: Operands from this index on (after the text) are files it writes (`uniq IN OUT`).
    outputs: int | None = None
    program: ProgramCheck | None = None
    traits: Callable[[Parsed], frozenset[str]] | None = None
    #: Options after which there is no text operand (`rg --files`).
    no_text: frozenset[str] = frozenset()
    #: Options that make it rewrite its operand files (`sed -i`).
    in_place: frozenset[str] = frozenset()
    #: Operands starting with `+` are commands run at start-up (`less +G`).
    plus: bool = False
    #: Options that make the operands files whose contents it prints (`tree --fromfile`,
    #: `man -l`).
    reads_operands: frozenset[str] = frozenset()
    #: First operands that are subcommands and what they do (`bat cache` writes its cache).
    subcommands: Mapping[str, Effect] = field(default_factory=dict)


#: Start-up commands of less and more that only move or search.
_PLUS_SAFE = re.compile(r"\+(?:\d*[gGpP%F]?|/[^!|]*|\?[^!|]*|:?[gG])")


def _plus_commands(
    cmd: str, name: str, operands: list[Word], st: ShellState
) -> tuple[bool, list[Word]]:
    rest, runs = [], False
    for w in operands:
        if w.text.startswith("+"):
            if w.value is None or not _PLUS_SAFE.fullmatch(w.value):
                st.add(option_runs(cmd, name, w.text))
                runs = True
        else:
            rest.append(w)
    return runs, rest


def option_runs(cmd: str, name: str, opt: str) -> Finding:
    return finding(
        "options.runs_program",
        f"`{cmd}`: `{opt}` makes `{name}` run another program (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
    )


def option_writes(cmd: str, name: str, opt: str) -> Finding:
    return finding(
        "options.writes_file",
        f"`{cmd}`: `{opt}` makes `{name}` write files (write_local, medium).",
        RiskClass.WRITE_LOCAL,
        Severity.MEDIUM,
    )


def option_connects(cmd: str, name: str, opt: str) -> Finding:
    return finding(
        "options.connects",
        f"`{cmd}`: `{opt}` makes `{name}` connect to another machine (network, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        Category.NETWORK,
    )


def option_changes(cmd: str, name: str, opt: str) -> Finding:
    return finding(
        "options.changes_system",
        f"`{cmd}`: `{opt}` makes `{name}` change system settings (privileged, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        Category.PRIVILEGED,
    )


def option_destroys(cmd: str, name: str, opt: str) -> Finding:
    return finding(
        "options.destroys",
        f"`{cmd}`: `{opt}` makes `{name}` delete data (destructive, high).",
        RiskClass.DESTRUCTIVE,
        Severity.HIGH,
        Category.DESTRUCTIVE,
    )


def unknown_option(cmd: str, name: str, opts: tuple[str, ...]) -> Finding:
    listed = ", ".join(f"`{o}`" for o in opts[:3])
    return finding(
        "options.unknown",
        f"`{cmd}` gives `{name}` {listed}, which its option grammar does not list, so what "
        "it does is not known (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
    )


def effect_findings(
    cmd: str, name: str, parsed: Parsed, g: Grammar, st: ShellState
) -> tuple[str, list[Word]]:
    """Findings for the options' effects; the base they imply and the files they write."""
    base = "read"
    writes: list[Word] = []
    for opt, effect in effects_of(parsed, g):
        label = opt.name if opt.value is None else f"{opt.name} {opt.value.text}"
        if effect is Effect.EXEC:
            st.add(option_runs(cmd, name, label))
            base = "exec"
        elif effect in (Effect.WRITE, Effect.WRITES):
            st.add(option_writes(cmd, name, label))
            base = "write" if base == "read" else base
            if effect is Effect.WRITE and opt.value is not None:
                writes.append(opt.value)
        elif effect is Effect.READ:
            if opt.value is not None:
                st.add(*check_path(opt.value.approx, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
        elif effect is Effect.CONNECT:
            st.add(option_connects(cmd, name, label))
            base = "exec"
        elif effect is Effect.CHANGE:
            st.add(option_changes(cmd, name, label))
            base = "exec"
        elif effect is Effect.DESTROY:
            st.add(option_destroys(cmd, name, label))
            base = "exec"
        elif effect is Effect.ENV:
            st.add(env_dump(cmd))
    return base, writes


def _program(found: list[Finding], base: str, st: ShellState) -> str:
    """Add the program text's findings; the base they imply."""
    st.add(*found)
    if any(f.risk is RiskClass.EXEC or f.risk is RiskClass.DESTRUCTIVE for f in found):
        return "exec"
    if any(f.risk is RiskClass.WRITE_LOCAL for f in found) and base == "read":
        return "write"
    return base


def _written_operands(
    reader: Reader,
    cmd: str,
    name: str,
    parsed: Parsed,
    operands: list[Word],
    writes: list[Word],
    st: ShellState,
    base: str,
) -> tuple[str, list[Word]]:
    """Operands it writes (`uniq IN OUT`, `sed -i FILE`, `bat cache`): added to `writes`;
    returns the base and the operands left to read."""
    wrote = False
    if reader.outputs is not None and len(operands) > reader.outputs:
        outs = operands[reader.outputs :]
        operands = operands[: reader.outputs]
        st.add(option_writes(cmd, name, f"the operand {outs[0].text}"))
        writes.extend(outs)
        wrote = True
    if reader.in_place and parsed.has(*reader.in_place):
        st.add(option_writes(cmd, name, "in place"))
        writes.extend(operands)
        wrote = True
    if reader.subcommands and operands and operands[0].text in reader.subcommands:
        st.add(option_writes(cmd, name, operands[0].text))
        wrote = True
    return ("write" if wrote and base == "read" else base), operands


def read_command(reader: Reader, name: str, args: list[Word], st: ShellState) -> Result:
    """Classify one reader invocation; adds findings to `st`."""
    g = reader.grammar
    parsed = parse(args, g)
    cmd = shown([Word.of(name), *args])
    base, writes = effect_findings(cmd, name, parsed, g, st)
    if g.strict and parsed.unknown:
        st.add(unknown_option(cmd, name, parsed.unknown))
        base = "exec"
    operands = list(parsed.operands)
    if reader.plus:
        runs, operands = _plus_commands(cmd, name, operands, st)
        base = "exec" if runs else base
    texts = parsed.values(*reader.text_options) if reader.text_options else []
    if reader.text and not texts and not parsed.has(*reader.no_text):
        texts, operands = operands[: reader.text], operands[reader.text :]
    if reader.program is not None:
        base = _program(reader.program(name, texts, parsed, st), base, st)
    base, operands = _written_operands(reader, cmd, name, parsed, operands, writes, st, base)
    traits = reader.traits(parsed) if reader.traits is not None else frozenset()
    kind = "paths" if parsed.has(*reader.reads_operands) else reader.operands
    if kind == "paths":
        for w in operands:
            if w.text != "-":  # every value the word may take (`${X:-default}`, `f=…; $f`)
                for candidate in (w.approx, *w.alts):
                    st.add(*check_path(candidate, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
            if w.value is None and NAMES_PROTECTED in w.traits:
                st.add(named_by_substitution(cmd))
    elif kind == "data" and name in _PRINTERS:
        # `cat $(echo ~/.ssh/id_rsa)`: what it prints may become another command's file name
        if any(
            check_path(candidate, st.cwd, st.rules, Access.READ, "")
            for w in operands
            for candidate in (w.approx, *w.alts)
        ):
            traits = traits | {NAMES_PROTECTED}
    return (base, traits, writes)


#: Trait of a command whose output names a protected path (`echo ~/.ssh/id_rsa`).
NAMES_PROTECTED = "names_protected"
_PRINTERS = frozenset({"echo", "printf"})


def named_by_substitution(cmd: str) -> Finding:
    return finding(
        "target.protected_read_indirect",
        f"`{cmd}` reads a file named by a substitution whose output names a protected secret "
        "location; whatever it reads enters the agent's context (secret_access, critical).",
        RiskClass.EGRESS,
        Severity.CRITICAL,
        Category.SECRET_ACCESS,
    )


def decoding(short: str, *long: str) -> Callable[[Parsed], frozenset[str]]:
    """Traits for a decoder: DECODE when one of its decode options is given."""
    names = {"-" + c for c in short} | set(long)

    def traits(parsed: Parsed) -> frozenset[str]:
        return frozenset({DECODE}) if parsed.has(*names) else frozenset()

    return traits
