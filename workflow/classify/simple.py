"""Is a shell command one simple command, and what is its argv? (For command grants.)

A grant for `npm test` must cover `npm test --watch` and never `npm test && curl …`, `npm test
| sh`, `npm test > ~/.bashrc` or `npm $(curl …)`: so a command is matched by argv, and only
when the tree-sitter parse (the same parser as the shell analysis, `workflow.classify.shell`)
shows exactly one command made of literal words — no list, pipeline, redirection, background
`&`, substitution, expansion, assignment, glob, tilde, brace or comment. Anything else gives
None and no grant covers it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tree_sitter import Node

from workflow.classify.shell import MAX_COMMAND_BYTES, _parse

# An unquoted word with one of these may expand to other words (globs, tilde, braces) or
# hide a syntax tree-sitter keeps in the word (escapes, history).
_EXPANDING = frozenset("*?[]{}~\\!")


def simple_argv(command: str | Sequence[str]) -> tuple[str, ...] | None:
    """The argv of `command` when it is one simple command of literal words, else None.

    A list (an argv run without a shell) is taken as it is.
    """
    if not isinstance(command, str):
        argv = tuple(command)
        return argv if argv and all(isinstance(w, str) and w for w in argv) else None
    data = command.encode("utf-8", "surrogatepass")
    if not command.strip() or len(data) > MAX_COMMAND_BYTES:
        return None
    root = _parse(data).root_node
    if root.has_error or root.type != "program":
        return None
    # Exactly one child, the command: a trailing `;`, `&` or comment is another node.
    if len(root.children) != 1 or root.children[0].type != "command":
        return None
    words: list[str] = []
    for child in root.children[0].children:
        if child.type == "command_name":
            if len(child.children) != 1:
                return None
            word = _literal(child.children[0])
        else:
            word = _literal(child)
        if word is None:
            return None
        words.append(word)
    return tuple(words) if words else None


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _literal(node: Node) -> str | None:
    """The value of a word made only of literal text, else None."""
    kind = node.type
    if kind in ("word", "number"):
        text = _text(node)
        return None if _EXPANDING & set(text) else text
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "string":
        parts: list[str] = []
        for part in node.children:
            if part.type == '"':
                continue
            if part.type != "string_content" or any(c in _text(part) for c in "\\$`"):
                return None
            parts.append(_text(part))
        return "".join(parts)
    if kind == "concatenation":
        pieces = [_literal(c) for c in node.children]
        return None if any(p is None for p in pieces) else "".join(p or "" for p in pieces)
    return None


def starts_with(argv: Sequence[str], prefix: Sequence[str]) -> bool:
    """Whether `argv` begins with every word of `prefix` (word for word, not by text)."""
    return bool(prefix) and len(argv) >= len(prefix) and tuple(argv[: len(prefix)]) == tuple(prefix)
