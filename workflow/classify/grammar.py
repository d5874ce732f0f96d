"""Option grammars: how one program's command line reads (which options take a value).

A "read-only" program is only read-only for some of its options: `rg --pre CMD` runs CMD,
`sort -o FILE` writes FILE, `awk -v a=b PROGRAM` has its program *after* an option value. So
every command on the read-only list declares its grammar here, and its words are parsed the way
the program itself parses them (getopt_long: clustered short options, `-ovalue`/`-o value`,
`--opt=value`/`--opt value`, unique abbreviations of long options, `--` ending the options)
before its program text or operands are looked at.

Each option may carry an `Effect`: it runs a program, writes its value, reads its value as a
file, connects to the network, changes the system, destroys data or prints the environment.
Options without an effect are harmless. Pure: strings in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from workflow.classify.shellstate import Word


class Effect(Enum):
    """What an option makes a program do beyond printing."""

    EXEC = "runs another program"
    WRITE = "writes the file it names"
    WRITES = "writes files"
    READ = "reads the file it names"
    CONNECT = "connects to another machine"
    CHANGE = "changes system settings"
    DESTROY = "deletes data"
    ENV = "prints the environment"


@dataclass(frozen=True, slots=True)
class Opt:
    """One parsed option: its name as the grammar spells it, and its value (None: a flag)."""

    name: str
    value: Word | None


@dataclass(frozen=True, slots=True)
class Parsed:
    options: tuple[Opt, ...]
    operands: tuple[Word, ...]
    #: Options the grammar does not know (a strict grammar fails closed on them).
    unknown: tuple[str, ...]

    def has(self, *names: str) -> bool:
        return any(o.name in names for o in self.options)

    def values(self, *names: str) -> list[Word]:
        return [o.value for o in self.options if o.name in names and o.value is not None]


@dataclass(frozen=True)
class Grammar:
    """A program's options. `flags`/`values` are short option letters (without and with a
    value); `long_flags`/`long_values` long options; `optional` short and `long_optional` long
    options whose value may only be attached (`-i[SUFFIX]`, `--color[=WHEN]`); `long_pairs`
    long options followed by two words (`jq --arg NAME VALUE`: the value is the second);
    `single` options spelled with one dash that are not clusters (`-name`, `-help`).
    `strict`: an unknown option is reported as unknown.
    `permute`: options may follow operands (GNU); otherwise the first operand ends them.
    `abbreviate`: unique prefixes of long options are accepted (getopt_long)."""

    flags: str = ""
    values: str = ""
    optional: str = ""
    long_flags: frozenset[str] = frozenset()
    long_values: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    single: frozenset[str] = frozenset()
    single_values: frozenset[str] = frozenset()
    long_pairs: frozenset[str] = frozenset()
    effects: Mapping[str, Effect] = field(default_factory=dict)
    strict: bool = False
    permute: bool = True
    abbreviate: bool = True

    @property
    def longs(self) -> frozenset[str]:
        return self.long_flags | self.long_values | self.long_optional | self.long_pairs


def grammar(
    flags: str = "",
    values: str = "",
    long_flags: Iterable[str] = (),
    long_values: Iterable[str] = (),
    long_optional: Iterable[str] = (),
    single: Iterable[str] = (),
    single_values: Iterable[str] = (),
    effects: Mapping[str, Effect] | None = None,
    *,
    optional: str = "",
    long_pairs: Iterable[str] = (),
    strict: bool = False,
    permute: bool = True,
    abbreviate: bool = True,
) -> Grammar:
    """A Grammar from plain lists: long names are written with their dashes (`--output`)."""
    return Grammar(
        flags,
        values,
        optional,
        frozenset(long_flags),
        frozenset(long_values),
        frozenset(long_optional),
        frozenset(single),
        frozenset(single_values),
        frozenset(long_pairs),
        dict(effects or {}),
        strict,
        permute,
        abbreviate,
    )


def _resolve_long(name: str, g: Grammar) -> tuple[list[str], bool]:
    """The long options `name` can stand for, and whether it is known at all."""
    if name in g.longs:
        return [name], True
    if g.abbreviate:
        hits = sorted(n for n in g.longs if n.startswith(name))
        if hits:
            return hits, True
    return [name], False


def parse(args: Sequence[Word], g: Grammar) -> Parsed:
    """Options and operands of `args` under grammar `g`.

    An abbreviation that could stand for several long options stands for all of them (their
    effects all count), and takes a value when any of them does: the reading that finds more.
    """
    options: list[Opt] = []
    operands: list[Word] = []
    unknown: list[str] = []
    i, n = 0, len(args)
    while i < n:
        w = args[i]
        t = w.text
        i += 1
        if t == "--":
            operands.extend(args[i:])
            break
        if len(t) < 2 or t[0] != "-":
            operands.append(w)
            if not g.permute:
                operands.extend(args[i:])
                break
            continue
        if t.startswith("--"):
            name, eq, attached = t.partition("=")
            names, known = _resolve_long(name, g)
            if not known:
                unknown.append(name)
            takes = any(x in g.long_values for x in names)
            value: Word | None = None
            if any(x in g.long_pairs for x in names) and not eq:
                i += 1  # NAME VALUE: the value is the second word
                takes = True
            if eq:
                value = Word(attached if w.value is not None else None, w.approx.partition("=")[2])
            elif takes and i < n:
                value = args[i]
                i += 1
            options.extend(Opt(x, value) for x in names)
            continue
        if t in g.single or t in g.single_values:
            value = None
            if t in g.single_values and i < n:
                value = args[i]
                i += 1
            options.append(Opt(t, value))
            continue
        _cluster(w, args, i, g, options, unknown)
        if options and options[-1].value is not None and options[-1].value is _NEXT:
            options[-1] = Opt(options[-1].name, args[i] if i < n else None)
            i += 1
    return Parsed(tuple(options), tuple(operands), tuple(unknown))


_NEXT = Word("\x00next", "\x00next")


def _cluster(
    w: Word, args: Sequence[Word], i: int, g: Grammar, options: list[Opt], unknown: list[str]
) -> None:
    """A cluster of short options (`-abc`, `-ofile`): a value option takes the rest of the
    word, or the next word (marked `_NEXT` for the caller to fill in)."""
    t = w.text
    for j in range(1, len(t)):
        c = t[j]
        name = "-" + c
        if c in g.optional:
            rest = t[j + 1 :]
            value = Word(rest if w.value is not None else None, rest) if rest else None
            options.append(Opt(name, value))
            return
        if c in g.values:
            rest = t[j + 1 :]
            if rest:
                options.append(Opt(name, Word(rest if w.value is not None else None, rest)))
            else:
                options.append(Opt(name, _NEXT))
            return
        if c not in g.flags:
            unknown.append(name)
        options.append(Opt(name, None))


def effects_of(p: Parsed, g: Grammar) -> list[tuple[Opt, Effect]]:
    """Every (option, effect) the parsed options carry."""
    return [(o, g.effects[o.name]) for o in p.options if o.name in g.effects]


# --------------------------------------------------------------------------- find

#: find's primaries that take one value (two for -fprintf), from find(1).
_FIND_VALUE = frozenset(
    {
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-wholename",
        "-iwholename",
        "-regex",
        "-iregex",
        "-regextype",
        "-lname",
        "-ilname",
        "-type",
        "-xtype",
        "-perm",
        "-user",
        "-group",
        "-uid",
        "-gid",
        "-size",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-used",
        "-newer",
        "-anewer",
        "-cnewer",
        "-samefile",
        "-inum",
        "-links",
        "-maxdepth",
        "-mindepth",
        "-fstype",
        "-context",
        "-printf",
        "-fprint",
        "-fprint0",
        "-fls",
        "-files0-from",
    }
)
#: find's primaries that write the file they name.
FIND_WRITES = frozenset({"-fprint", "-fprint0", "-fls", "-fprintf"})
#: find's primaries that run a command or delete.
FIND_ACTS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete"})


def find_primaries(args: list[Word]) -> list[tuple[str, list[Word]]]:
    """find's expression as (primary, its values): a value (`-name -delete`) is never taken
    for a primary. `-exec ... ;` keeps its command words as values."""
    out: list[tuple[str, list[Word]]] = []
    i = 0
    while i < len(args):
        t = args[i].text
        if t in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(args) and args[end].text not in (";", "+"):
                end += 1
            out.append((t, list(args[i + 1 : end])))
            i = end + 1
        elif t == "-fprintf":
            out.append((t, list(args[i + 1 : i + 3])))
            i += 3
        elif (t.startswith("-newer") and len(t) > 6) or t in _FIND_VALUE:
            out.append((t, list(args[i + 1 : i + 2])))
            i += 2
        else:
            out.append((t, []))
            i += 1
    return out
