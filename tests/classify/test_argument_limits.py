"""Collections that stop checking (issue 18): past a limit the call fails closed, it never
stops looking and passes what it did not look at."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.classify.helpers import proposal
from workflow.classify.arguments import MAX_DEPTH, MAX_ITEMS, MAX_TARGET_CHARS
from workflow.classify.engine import classify
from workflow.classify.taxonomy import RiskClass


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=0, max_value=3 * MAX_ITEMS), st.sampled_from(["paths", "files"]))
def test_a_secret_anywhere_in_a_long_path_list_is_never_a_read(before: int, key: str) -> None:
    paths = [f"src/f{i}.py" for i in range(before)] + ["/home/agent/.ssh/id_rsa"]
    result = classify(proposal("read_file", {key: paths}))
    assert result.risk_class is not RiskClass.READ


def test_a_list_over_the_limit_fails_closed_even_without_a_secret() -> None:
    paths = [f"src/f{i}.py" for i in range(MAX_ITEMS + 1)]
    result = classify(proposal("read_file", {"paths": paths}))
    assert result.fail_closed
    assert "target.too_many" in {r.rule for r in result.reasons}
    ok = classify(proposal("read_file", {"paths": paths[: MAX_ITEMS - 1]}))
    assert ok.risk_class is RiskClass.READ


@given(st.integers(min_value=1, max_value=3 * MAX_DEPTH))
def test_a_secret_nested_deep_is_never_a_read(depth: int) -> None:
    value: Any = {"path": "/home/agent/.aws/credentials"}
    for _ in range(depth):
        value = {"inner": value}
    result = classify(proposal("read_file", {"spec": value}))
    assert result.risk_class is not RiskClass.READ


def test_a_path_too_long_to_inspect_fails_closed() -> None:
    path = "/home/agent/.ssh/id_rsa" + "/." * MAX_TARGET_CHARS
    result = classify(proposal("read_file", {"path": path}))
    assert result.risk_class is not RiskClass.READ
    prose = classify(proposal("read_file", {"path": "README.md", "input": "word " * 2000}))
    assert prose.risk_class is RiskClass.READ
