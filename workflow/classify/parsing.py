"""Parsing shell text with tree-sitter-bash, safely and within bounds.

`parse` is the only way to a tree: it refuses (with an unparseable tree) text whose parse
could crash the process (`textguard.scanner_hazard`), and caches trees bounded by the memory
they hold. The helpers here turn a node's text into a word's value (quoting removed).
"""

from __future__ import annotations

import re

import tree_sitter_bash
from tree_sitter import Language, Node, Parser, Tree

from workflow.classify.findings import Finding, finding
from workflow.classify.memo import CostBoundedLRU
from workflow.classify.shellstate import ShellState
from workflow.classify.taxonomy import RiskClass, Severity
from workflow.classify.textguard import describe, odd_character, scanner_hazard

MAX_COMMAND_BYTES = 64 * 1024

_LANGUAGE = Language(tree_sitter_bash.language())
_PARSER = Parser(_LANGUAGE)

_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_ESCAPE = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|u[0-9A-Fa-f]{1,4}|"
    r"U[0-9A-Fa-f]{1,8}|c.|.)",
    re.DOTALL,
)


def text_of(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def ansi_c(body: str) -> str:
    def sub(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "xuU":
            return chr(int(esc[1:], 16)) if len(esc) > 1 else m.group(0)
        if esc[0].isdigit():
            return chr(int(esc, 8) & 0xFF)
        if esc[0] == "c":
            return chr(ord(esc[1]) & 0x1F)
        return _ANSI_SIMPLE.get(esc, m.group(0))

    return _ANSI_ESCAPE.sub(sub, body)


def unescape_word(text: str) -> str:
    if "\\" not in text:
        return text  # the common case: nothing to unescape
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def unescape_dq(text: str) -> str:
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def problem(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_missing:
            return f"a missing `{node.type}` at column {node.start_point[1] + 1}"
        if node.type == "ERROR":
            snippet = text_of(node)[:40]
            return f"a syntax error at `{snippet}` (line {node.start_point[0] + 1})"
        stack.extend(c for c in node.children if c.has_error or c.is_missing)
    return "a syntax error"


def parse_failure(message: str) -> Finding:
    return finding(
        "shell.unparseable",
        message,
        RiskClass.EXEC,
        Severity.CRITICAL,
        fail_closed=True,
    )


def odd_text_finding(ch: str, label: str) -> Finding:
    return finding(
        "shell.odd_character",
        f"{label} contains {describe(ch)}, a control or invisible character that shells and "
        "screens split or show differently, so what an approver reads may not be what runs; "
        "it fails closed (exec, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        fail_closed=True,
    )


def text_ok(source: str, label: str, state: ShellState) -> bool:
    """Refuses, before parsing, text the parser could crash on or that hides what it does."""
    ch = odd_character(source)
    if ch is not None:
        state.add(odd_text_finding(ch, label))
        return False
    if scanner_hazard(source):
        state.add(
            parse_failure(
                f"{label} puts a character beyond Latin-1 right after `{{`, `$`, `?` or an option "
                "dash, where the shell parser cannot read it safely; it fails closed "
                "(critical)."
            )
        )
        return False
    return True


#: A tree-sitter tree holds about this many bytes per byte of source (measured with RSS:
#: 98 for 100 trees of 64 KiB and for 2,000 trees of 200 bytes), plus a fixed overhead.
TREE_BYTES_PER_SOURCE_BYTE = 100
TREE_OVERHEAD = 2048
#: The parse cache holds at most this much (estimated); an agent controls the input, so the
#: bound is on bytes, not entries. Commands over `MAX_CACHED_SOURCE` bytes are not cached.
PARSE_CACHE_BYTES = 32 * 1024 * 1024
MAX_CACHED_SOURCE = 4096


def _tree_cost(data: bytes) -> int:
    return TREE_OVERHEAD + TREE_BYTES_PER_SOURCE_BYTE * len(data)


_UNPARSEABLE = _PARSER.parse(b"(")  # a tree with an ERROR node


def _parse_safely(data: bytes) -> Tree:
    """The tree of `data`, or an unparseable tree when parsing it could crash the process:
    every caller (the analysis, command grants) then treats it as unparseable."""
    if scanner_hazard(data.decode("utf-8", "replace")):
        return _UNPARSEABLE
    return _PARSER.parse(data)


# A tree depends only on the bytes and is never mutated, so a bounded cache is honest.
parse: CostBoundedLRU[bytes, Tree] = CostBoundedLRU(
    _parse_safely,
    _tree_cost,
    budget=PARSE_CACHE_BYTES,
    max_entry=_tree_cost(b"x" * MAX_CACHED_SOURCE),
)
