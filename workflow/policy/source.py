"""Where a key path lives in the policy text, and pydantic errors turned into sentences.

tomllib reports the line of a syntax error; for a validation error we only have the key path,
so we find the line that defines it (the longest prefix of the path that some line names).
This is a reader's aid: when the key cannot be found the message simply has no line.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _parse_key(text: str, pos: int) -> tuple[list[str], int] | None:
    """Parse a dotted TOML key starting at `pos`; returns (parts, end) or None."""
    parts: list[str] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            return None
        ch = text[pos]
        if ch in "\"'":
            end = text.find(ch, pos + 1)
            if end < 0:
                return None
            parts.append(text[pos + 1 : end])
            pos = end + 1
        else:
            m = _BARE.match(text, pos)
            if not m:
                return None
            parts.append(m.group(0))
            pos = m.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == ".":
            pos += 1
            continue
        return parts, pos


def _skip_string(text: str, pos: int) -> int:
    quote = text[pos]
    pos += 1
    while pos < len(text) and text[pos] != quote:
        pos += 2 if quote == '"' and text[pos] == "\\" else 1
    return pos + 1


def _inline_keys(text: str, pos: int, prefix: list[str]) -> Iterator[list[str]]:
    """Key paths defined inside inline tables in the value starting at `pos`."""
    stack = [prefix]
    last_key: list[str] = prefix
    expect_key = False
    while pos < len(text):
        ch = text[pos]
        if ch in "\"'" and not expect_key:
            pos = _skip_string(text, pos)
            continue
        if ch == "#":
            return
        if ch == "{":
            stack.append(last_key)
            expect_key = True
            pos += 1
            continue
        if ch == "}":
            if len(stack) > 1:
                stack.pop()
            pos += 1
            continue
        if ch == ",":
            expect_key = len(stack) > 1
            pos += 1
            continue
        if expect_key and ch not in " \t":
            parsed = _parse_key(text, pos)
            if parsed is None:
                return
            parts, end = parsed
            last_key = stack[-1] + parts
            yield last_key
            eq = text.find("=", end)
            pos = end if eq < 0 else eq + 1
            expect_key = False
            continue
        pos += 1


def key_lines(text: str) -> Iterator[tuple[int, list[str]]]:
    """Every (line number, key path) a TOML text defines, approximately."""
    table: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            inner = line.lstrip("[")
            parsed = _parse_key(inner, 0)
            if parsed is not None:
                table = parsed[0]
                yield number, table
            continue
        parsed = _parse_key(line, 0)
        if parsed is None:
            continue
        parts, end = parsed
        if end >= len(line) or line[end] != "=":
            continue
        path = table + parts
        yield number, path
        yield from ((number, p) for p in _inline_keys(line, end + 1, path))


def render_key(parts: Sequence[str]) -> str:
    """A key path as TOML would spell it: `tools."my.tool".pin`."""
    return ".".join(p if _BARE.fullmatch(p) else '"' + p.replace('"', '\\"') + '"' for p in parts)


def locate(text: str, key_path: Sequence[str]) -> int | None:
    """The line that defines `key_path`, or the closest enclosing key that a line defines."""
    want = [str(p) for p in key_path]
    best: tuple[int, int] | None = None  # (matched length, line)
    for number, path in key_lines(text):
        if len(path) <= len(want) and want[: len(path)] == path:
            if best is None or len(path) > best[0]:
                best = (len(path), number)
    return best[1] if best else None


# --------------------------------------------------------------------------- pydantic errors


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional from a field annotation."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def known_keys(root: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The keys the model accepts at the table that holds `loc[-1]` (empty if unknown)."""
    current: Any = root
    path = list(loc[:-1])
    while path:
        head = path.pop(0)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(head))
            if field is None:
                return []
            current = _unwrap(field.annotation)
        elif get_origin(current) is dict:
            current = _unwrap(get_args(current)[1])
        else:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def error_path(loc: Sequence[int | str]) -> list[str]:
    """A pydantic location as a key path, without pydantic's internal markers."""
    return [str(p) for p in loc if p != "[key]" and not str(p).startswith("function-")]


def error_message(root: type[BaseModel], error: ErrorDetails) -> str:
    """One pydantic error as a sentence without Python type names."""
    loc = error["loc"]
    kind = error["type"]
    last = str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        keys = known_keys(root, loc)
        hint = f"; the keys allowed here are: {', '.join(keys)}" if keys else ""
        return f"`{last}` is not a known setting (check the spelling){hint}"
    if kind == "missing":
        return f"`{last}` is required here"
    if loc and loc[-1] == "[key]":
        return f"the key {error.get('input')!r} is not allowed here: {error['msg']}"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return f"{message} (got {error.get('input')!r})" if kind.startswith("enum") else message
