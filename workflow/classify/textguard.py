"""Text a command may not contain, checked before anything parses it.

Two guards, both failing closed:

- `scanner_hazard`: tree-sitter-bash 0.25's external scanner (`src/scanner.c`) passes the code
  point it looks at to C's narrow `isdigit`/`isalpha`, whose glibc table covers -128..255 only.
  A larger code point read at one of those places indexes past the table and can kill the
  process (it does, deterministically for some code points, after `{` and `{digits..`). The
  places are: after `{` and `{digits..digits` (brace ranges), after `-letters` (test
  operators), after `$` in a here-document and after `?` (variable names). Such a command is
  refused without being parsed. The condition is wider than the crash (any code point past
  the table, at any of those places, in any context) but spares Latin-1 letters, which the
  table covers: `peut-être` or `naïve-é` in a commit message still parses.
- `odd_character`: control characters (C0 other than tab and newline, DEL, C1), Unicode line
  and paragraph separators, format characters (zero-width, bidi, BOM...), private-use and
  surrogate code points, and spaces other than the ASCII space. Shells, terminals and
  approvers' screens split or show these differently (`echo ok\\rcurl …` looks like `curl …`),
  so what an approver reads is not what runs.
"""

from __future__ import annotations

import re
import unicodedata

_SCANNER_HAZARD = re.compile(r"(?:[$?]|-[A-Za-z]*|\{[0-9]*(?:\.\.[0-9]*)?)[^\x00-\xff]")
_ASCII_ODD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ODD_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Zs"})


def scanner_hazard(text: str) -> bool:
    """True when parsing `text` with tree-sitter-bash could read past a C ctype table."""
    return not text.isascii() and _SCANNER_HAZARD.search(text) is not None


def odd_character(text: str) -> str | None:
    """The first character of `text` that shells and screens disagree on, or None."""
    m = _ASCII_ODD.search(text)
    if m is not None:
        return m.group(0)
    if text.isascii():
        return None
    for ch in text:
        if ord(ch) > 0x7F and unicodedata.category(ch) in _ODD_CATEGORIES:
            return ch
    return None


def describe(ch: str) -> str:
    """`U+200B (ZERO WIDTH SPACE)`: a character named for the approver."""
    name = unicodedata.name(ch, "") or {"\x7f": "DELETE"}.get(ch, "a control character")
    return f"U+{ord(ch):04X} ({name})"
