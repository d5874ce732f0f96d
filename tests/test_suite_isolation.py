"""The suite never reads the configuration of whoever runs it (`tests/conftest.py`): a
`.headgate/` that `headgate serve` left in the current directory, or `HEADGATE_*` variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workflow.client.connection import data_dir_from
from workflow.client.trust import pinned_key
from workflow.signing import ServiceKey


def test_a_test_has_an_empty_data_dir_of_its_own_and_none_of_the_user_s_settings() -> None:
    data = data_dir_from(None, os.environ)
    assert data.is_absolute()
    assert list(data.iterdir()) == []
    found = {name for name in os.environ if name.startswith("HEADGATE_")}
    assert found <= {"HEADGATE_TEST_POSTGRES_URL", "HEADGATE_AGENT_CLIS", "HEADGATE_DATA_DIR"}


def test_a_client_ignores_the_data_dir_serve_left_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / ".headgate"
    stale.mkdir()
    (stale / "service.pub").write_text(ServiceKey.generate().public_key + "\n")
    monkeypatch.chdir(tmp_path)
    assert pinned_key() is None  # the client asks the service it reaches for its key
