"""The `headgate` executable under test: the script installed beside the interpreter that runs
the tests (the virtualenv's `bin/`), found without PATH, so `.venv/bin/python -m pytest` works
without activating the virtualenv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def headgate_executable() -> str:
    """The path of the `headgate` console script installed with this interpreter."""
    found = Path(sys.executable).parent / "headgate"
    if not found.is_file():
        pytest.fail(
            f"no `headgate` executable beside {sys.executable}: install the project into this "
            "interpreter's environment (pip install -e '.[dev]')"
        )
    return str(found)
