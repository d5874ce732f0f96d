"""The classifier's resources per proposal are bounded (issue 13): the parse cache by bytes,
the work on one command by steps, nesting and words. Past a bound the command fails closed.
Work is asserted as counted steps, never as time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workflow.classify import parsing, shell
from workflow.classify.memo import CostBoundedLRU
from workflow.classify.shellstate import MAX_ARGV_WORDS, MAX_NESTING, MAX_WORK, ShellState
from workflow.classify.tables import DEFAULT_TABLES
from workflow.classify.taxonomy import RiskClass

#: The most a single charge can add past the bound before it raises.
LIMIT = MAX_WORK + MAX_ARGV_WORDS + 1


def _analyse(command: str | list[str]) -> ShellState:
    state = shell.analyse_command(command, None, shell.new_state(None, DEFAULT_TABLES))
    assert state.work <= LIMIT
    assert state.nesting == 0
    return state


def _fails_closed(state: ShellState) -> bool:
    return any(f.fail_closed and f.risk is not RiskClass.READ for f in state.findings)


WRAPPERS = st.sampled_from(["sudo", "nice", "env", "nohup", "timeout 5", "xargs", "command"])


@settings(max_examples=25, deadline=None)
@given(WRAPPERS, st.integers(min_value=1, max_value=60_000))
def test_an_argv_list_of_nested_wrappers_is_bounded(wrapper: str, count: int) -> None:
    argv = wrapper.split() * count + ["ls"]
    state = _analyse(argv)
    if count > MAX_NESTING:
        assert _fails_closed(state)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=200_000), st.sampled_from(["a", "--x", "ab" * 500]))
def test_a_long_argv_list_is_bounded(count: int, word: str) -> None:
    state = _analyse(["echo", *[word] * count])
    if count >= MAX_ARGV_WORDS or count * len(word) > shell.MAX_COMMAND_BYTES:
        assert _fails_closed(state)


OPENERS = st.sampled_from(
    [
        ("echo ", "$(", ")"),
        ("", "(", ")"),
        ("", "{ ", "; }"),
        ("echo ", "${a:-", "}"),
        ("echo ", '"$(echo ', ')"'),
        ("", "if true; then ", "; fi"),
    ]
)


@settings(max_examples=25, deadline=None)
@given(OPENERS, st.integers(min_value=1, max_value=8_000))
def test_deep_nesting_in_a_command_string_is_bounded(
    pair: tuple[str, str, str], depth: int
) -> None:
    prefix, opener, closer = pair
    command = prefix + opener * depth + "ls" + closer * depth
    state = _analyse(command)
    if depth > MAX_NESTING:
        assert _fails_closed(state)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(["a b c; ", "cat x | grep y && ", "ls; "]), st.integers(1, 20_000))
def test_many_commands_in_one_string_are_bounded(piece: str, count: int) -> None:
    command = (piece * count)[: shell.MAX_COMMAND_BYTES] + "ls"
    _analyse(command)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=200), st.integers(1, 5_000))
def test_the_cost_bounded_cache_never_holds_more_than_its_budget(
    keys: list[bytes], budget: int
) -> None:
    cache: CostBoundedLRU[bytes, int] = CostBoundedLRU(len, lambda k: 10 + len(k), budget, 600)
    for key in keys:
        assert cache(key) == len(key)
        assert cache.total <= budget
    assert cache.total == sum(10 + len(k) for k in cache._entries)


def test_the_parse_cache_is_bounded_by_bytes() -> None:
    for i in range(600):
        parsing.parse(f"echo {i} ".encode() + b"x" * 1_000)
        if i % 20 == 0:
            parsing.parse(f"echo {i} ".encode() + b"y" * 60_000)
    cache = parsing.parse
    assert cache.total <= parsing.PARSE_CACHE_BYTES
    assert cache.total == sum(parsing._tree_cost(k) for k in cache._entries)
    assert all(len(k) <= parsing.MAX_CACHED_SOURCE for k in cache._entries)
