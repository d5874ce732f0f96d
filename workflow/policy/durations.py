"""Durations in the policy file: seconds as an integer, or a string such as "1h30m" or "90s"."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+)\s*([smhdw])")
_WHOLE = re.compile(r"^\s*(?:\d+\s*[smhdw]\s*)+$")


def parse_duration(value: Any) -> Any:
    """Turn "1h", "30m", "1h30m", "45s", "2d" or a number of seconds into seconds.

    Anything else is returned unchanged so that pydantic reports it with its usual message.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string such as '1h' or '30m'")
    if isinstance(value, str):
        text = value.strip().lower()
        if text.isdigit():
            return int(text)
        if not _WHOLE.match(text):
            raise ValueError(
                f"{value!r} is not a duration; write seconds (3600) or a string such as "
                "'1h', '30m', '1h30m' or '2d'"
            )
        return sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(text))
    return value


def format_duration(seconds: int) -> str:
    """The shortest "1h30m"-style spelling of a number of seconds."""
    if seconds <= 0:
        return "0s"
    parts: list[str] = []
    rest = seconds
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts)


#: A positive number of seconds, accepted as an integer or as "1h", "30m", "1h30m", ...
Duration = Annotated[int, BeforeValidator(parse_duration), Field(ge=1)]
#: The same, or 0 (a setting whose 0 means "never", as `[retention]`'s ages).
DurationOrZero = Annotated[int, BeforeValidator(parse_duration), Field(ge=0)]
