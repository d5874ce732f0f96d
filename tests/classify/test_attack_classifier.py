"""Classifier cases an attacker's tries found after the first round of hardening."""

from __future__ import annotations

import pytest

from tests.classify.helpers import proposal
from workflow.classify.engine import classify
from workflow.classify.taxonomy import RiskClass

# A data dir not called `.headgate` (`serve --data-dir D`), named relative to a directory the
# call does not state: only the files' own names say they are the service's.
DATA_FILES = [
    "D/headgate.db", "state/headgate.db-wal", "D/headgate.db-shm", "D/notify.key", "D/hook.token",
]  # fmt: skip


@pytest.mark.parametrize("path", DATA_FILES)
@pytest.mark.parametrize(
    ("tool", "key"),
    [("read_file", "path"), ("Read", "file_path"), ("read_text_file", "path"), ("view", "path")],
)
def test_the_services_files_in_a_data_dir_of_any_name_are_not_reads(
    tool: str, key: str, path: str
) -> None:
    result = classify(proposal(tool, {key: path}))
    assert result.risk_class is not RiskClass.READ
    assert result.severity.value == "critical"


@pytest.mark.parametrize("path", DATA_FILES)
def test_the_services_files_are_not_read_through_a_shell(path: str) -> None:
    for command in (f"cat {path}", f"strings {path}", f"sqlite3 {path} .dump"):
        result = classify(proposal("bash", {"command": command}))
        assert result.severity.value == "critical", command


def test_a_file_merely_named_like_a_database_elsewhere_stays_a_read() -> None:
    assert classify(proposal("read_file", {"path": "docs/headgate.md"})).risk_class is (
        RiskClass.READ
    )
