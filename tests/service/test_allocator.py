"""The arena limit `headgate serve` sets on glibc, and the environment that overrides it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workflow.service.allocator import limit_arenas, trim

_PROBE = """
from workflow.service.allocator import limit_arenas
print(limit_arenas())
"""


def _probe(env: dict[str, str]) -> str:
    # In a process of its own: the limit is process-wide and set once, before threads start.
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_arena_limit_is_set_unless_the_environment_says_how_many() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _probe(env) == "True"
    assert _probe({**env, "MALLOC_ARENA_MAX": "4"}) == "False"


def test_the_environment_wins_in_this_process_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert limit_arenas() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_memory_is_given_back() -> None:
    assert trim() is True
