"""Archives and compressors: listing or printing an archive is a read, unpacking one writes.

`tar -tf a.tar`, `unzip -l a.zip`, `gunzip -c a.gz`, `xz -dc a.xz` only print. tar's options
are parsed with its grammar (old-style bundled keys `tar tvf a.tar` too), because some act in
any mode: `--to-command`, `-I/--use-compress-program`, `--checkpoint-action`, `--rsh-command`,
`-F/--info-script` run programs, `-f host:file` connects through rsh, `--index-file` writes.
Extracting writes into `-C DIR` (or the working directory), creating writes the archive, and
`--delete` deletes members.
"""

from __future__ import annotations

import re

from workflow.classify.findings import finding
from workflow.classify.grammar import Effect, Parsed, grammar, parse
from workflow.classify.readers import (
    effect_findings,
    option_connects,
    option_writes,
)
from workflow.classify.shellstate import ShellState, Word, shown
from workflow.classify.targets import Access, check_path
from workflow.classify.taxonomy import Category, RiskClass, Severity

Result = tuple[str | None, frozenset[str], list[Word] | None]
E, W, R = Effect.EXEC, Effect.WRITE, Effect.READ

TAR = grammar(
    values="fbCTXgKNLVFIH",
    long_values=(
        "--file", "--directory", "--files-from", "--exclude-from", "--exclude",
        "--listed-incremental", "--starting-file", "--newer", "--newer-mtime", "--after-date",
        "--tape-length", "--label", "--info-script", "--new-volume-script",
        "--use-compress-program", "--to-command", "--checkpoint-action", "--rsh-command",
        "--rmt-command", "--format", "--owner", "--group", "--mode", "--mtime",
        "--blocking-factor", "--record-size", "--index-file", "--volno-file", "--transform",
        "--xform", "--strip-components", "--suffix", "--warning", "--quoting-style", "--sort",
        "--hole-detection", "--level", "--pax-option", "--owner-map", "--group-map",
        "--xattrs-include", "--xattrs-exclude", "--add-file", "--index-file",
    ),
    long_optional=("--backup", "--checkpoint", "--occurrence", "--atime-preserve", "--totals",
                   "--one-top-level"),
    effects={
        "-I": E, "--use-compress-program": E, "--to-command": E, "--checkpoint-action": E,
        "--rsh-command": E, "--rmt-command": E, "-F": E, "--info-script": E,
        "--new-volume-script": E, "--index-file": W, "--volno-file": W, "-T": R,
        "--files-from": R, "-X": R, "--exclude-from": R,
    },
)  # fmt: skip
_OLD_STYLE = re.compile(r"^[A-Za-z]+$")
_REMOTE_ARCHIVE = re.compile(r"^[^/]*[^/\\]:")
_READ_OPS = frozenset({"-t", "--list", "-d", "--diff", "--compare"})
_WRITE_OPS = frozenset(
    {"-x", "--extract", "--get", "-c", "--create", "-r", "--append", "-u", "--update", "-A",
     "--catenate", "--concatenate"}
)  # fmt: skip


def _tar_words(args: list[Word]) -> list[Word]:
    """Old-style keys (`tar tvf a.tar x`) rewritten as options (`-t -v -f a.tar x`)."""
    if not args or args[0].value is None or not _OLD_STYLE.match(args[0].value):
        return args
    out: list[Word] = []
    rest = list(args[1:])
    for c in args[0].value:
        out.append(Word.of("-" + c))
        if c in TAR.values and rest:
            out.append(rest.pop(0))
    return out + rest


def tar(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    words = _tar_words(args)
    parsed = parse(words, TAR)
    cmd = shown([Word.of(name), *args])
    base, writes = effect_findings(cmd, name, parsed, TAR, st)
    archives = parsed.values("-f", "--file")
    if not parsed.has("--force-local"):
        for a in archives:
            if _REMOTE_ARCHIVE.match(a.text):
                st.add(option_connects(cmd, name, f"-f {a.text}"))
                base = "exec"
    if parsed.has("--delete"):
        st.add(
            finding(
                "archives.tar_delete",
                f"`{cmd}` deletes members of an archive (destructive, high).",
                RiskClass.DESTRUCTIVE,
                Severity.HIGH,
                Category.DESTRUCTIVE,
            )
        )
        return ("exec", frozenset(), archives)
    if _op(parsed, _READ_OPS) and not _op(parsed, _WRITE_OPS):
        for a in archives:
            st.add(*check_path(a.approx, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
        return (base, frozenset(), writes)
    if _op(parsed, frozenset({"-x", "--extract", "--get"})):
        target = parsed.values("-C", "--directory") or [Word.of(".")]
        for a in archives:
            st.add(*check_path(a.approx, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
        st.add(option_writes(cmd, name, "-x"))
        return ("exec" if base == "exec" else "write", frozenset(), writes + target)
    for member in parsed.operands:  # -c/-r/-u read the files they add
        st.add(*check_path(member.approx, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
    st.add(option_writes(cmd, name, "the archive"))
    return ("exec" if base == "exec" else "write", frozenset(), writes + archives)


def _op(parsed: Parsed, ops: frozenset[str]) -> bool:
    return parsed.has(*ops)


_STDOUT = re.compile(r"^-[a-zA-Z0-9]*[clt]")
_STDOUT_LONG = frozenset({"--stdout", "--to-stdout", "--list", "--test"})
COMPRESSORS = frozenset(
    {"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma", "zstd", "unzstd",
     "lz4", "pigz", "unpigz", "brotli", "lzip", "zstdcat"}
)  # fmt: skip


def compressor(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    """Printing to standard output, listing or testing reads; anything else rewrites files."""
    cmd = shown([Word.of(name), *args])
    vals = [a.text for a in args]
    files = [a for a in args if not a.text.startswith("-")]
    to_stdout = name == "zstdcat" or any(
        v in _STDOUT_LONG or (_STDOUT.match(v) and not v.startswith("--")) for v in vals
    )
    if to_stdout and not any(v == "-o" or v.startswith(("--output", "-o")) for v in vals):
        for f in files:
            st.add(*check_path(f.approx, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
        return ("read", frozenset(), [])
    st.add(option_writes(cmd, name, "without -c"))
    return ("write", frozenset(), files)


_UNZIP_LIST = re.compile(r"^-[a-zA-Z]*[lvZtpc]")


def unzip(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    cmd = shown([Word.of(name), *args])
    vals = [a.text for a in args]
    files = [
        a for i, a in enumerate(args) if not a.text.startswith("-") and vals[i - 1 : i] != ["-d"]
    ]
    if name == "zipinfo" or (vals and _UNZIP_LIST.match(vals[0]) and "-d" not in vals):
        for f in files[:1]:
            st.add(*check_path(f.approx, st.cwd, st.rules, Access.READ, f"`{cmd}`"))
        return ("read", frozenset(), [])
    target = [args[i + 1] for i, v in enumerate(vals[:-1]) if v == "-d"] or [Word.of(".")]
    st.add(option_writes(cmd, name, "extracting"))
    return ("write", frozenset(), target)


ARCHIVE_RULES = {
    "tar": tar,
    "gtar": tar,
    "bsdtar": tar,
    "unzip": unzip,
    "zipinfo": unzip,
    **{n: compressor for n in COMPRESSORS},
}
