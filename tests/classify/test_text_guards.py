"""Text refused before the shell parser sees it: parser-crashing characters and characters
that shells and screens split or show differently (issue 18, control characters; the
tree-sitter-bash scanner crash)."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.classify.corpus import load_cases
from tests.classify.helpers import proposal, run
from workflow.classify.engine import classify
from workflow.classify.taxonomy import RiskClass
from workflow.classify.textguard import odd_character, scanner_hazard

# Where tree-sitter-bash's scanner calls a narrow ctype function on the next code point.
HAZARD_PREFIXES = ["{", "x{", "echo a{1..", "echo a{12", "echo {1..2", "ls -", "[[ -a", "$", "${x?"]
BIG = st.integers(min_value=0x100, max_value=0x10FFFF).filter(lambda c: not 0xD800 <= c < 0xE000)

_CHILD = """
import json, sys
from tests.classify.helpers import run
from workflow.classify.simple import simple_argv
out = []
for command in json.load(sys.stdin):
    result = run(command)
    assert simple_argv(command) is None  # command grants parse through the same guard
    out.append([result.risk_class.value, result.fail_closed])
print(json.dumps(out))
"""


def _classify_in_child(commands: list[str]) -> list[list[object]]:
    """Classify in a fresh interpreter: a crash in the parser kills that process, not pytest."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"the classifier process died ({done.returncode}): {done.stderr}"
    result: list[list[object]] = json.loads(done.stdout)
    return result


@settings(max_examples=4, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(HAZARD_PREFIXES), BIG), min_size=50, max_size=80))
def test_code_points_the_scanner_cannot_read_fail_closed_without_crashing(
    cases: list[tuple[str, int]],
) -> None:
    commands = [prefix + chr(cp) for prefix, cp in cases]
    commands += [f"bash -c $'{prefix}\\U{cp:08x}'" for prefix, cp in cases[:10]]
    for command, (risk, fail_closed) in zip(commands, _classify_in_child(commands), strict=True):
        assert risk != RiskClass.READ.value, command
        assert fail_closed, command


def test_the_known_crashing_command_is_refused_in_a_fresh_process() -> None:
    assert _classify_in_child(["{" + chr(0x2C6CA), "x{" + chr(0x10FFFD)]) == [
        ["exec", True],
        ["exec", True],
    ]


@given(st.sampled_from(HAZARD_PREFIXES), BIG)
def test_the_hazard_condition_covers_every_crash_site(prefix: str, cp: int) -> None:
    assert scanner_hazard(prefix + chr(cp))


def test_non_ascii_text_elsewhere_is_still_parsed() -> None:
    assert not scanner_hazard("echo 'café – naïve'")
    assert not scanner_hazard("git commit -m 'peut-être {é'")
    assert run("echo 'café'").risk_class is RiskClass.READ


ODD = st.one_of(
    st.sampled_from([chr(c) for c in [*range(0, 9), *range(11, 32), 0x7F]]),
    st.sampled_from([chr(c) for c in range(0x80, 0xA0)]),
    st.sampled_from(
        [
            "\u2028",
            "\u2029",
            "\u200b",
            "\u200c",
            "\u200d",
            "\u2060",
            "\ufeff",
            "\u200e",
            "\u200f",
            "\u061c",
            "\u00a0",
            "\u3000",
            *[chr(c) for c in range(0x202A, 0x202F)],
            *[chr(c) for c in range(0x2066, 0x206A)],
        ]
    ),
    st.characters(categories=["Cf", "Zl", "Zp", "Co"]),
)
CORPUS_COMMANDS = sorted(
    {
        c.proposal.arguments["command"]
        for c in load_cases()
        if isinstance(c.proposal.arguments.get("command"), str) and c.proposal.arguments["command"]
    }
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CORPUS_COMMANDS), ODD, st.integers(min_value=0))
def test_inserting_a_control_or_invisible_character_never_yields_a_read(
    command: str, ch: str, where: int
) -> None:
    at = where % (len(command) + 1)
    result = run(command[:at] + ch + command[at:])
    assert result.risk_class is not RiskClass.READ
    assert result.fail_closed


@settings(max_examples=100, deadline=None)
@given(ODD, st.integers(min_value=0, max_value=2))
def test_an_argv_list_with_an_odd_character_is_not_a_read(ch: str, where: int) -> None:
    argv = ["cat", "README.md", "notes.txt"]
    argv[where] = argv[where] + ch
    result = classify(proposal("run_shell", {"command": argv}))
    assert result.risk_class is not RiskClass.READ


def test_tab_and_newline_are_ordinary() -> None:
    assert odd_character("ls\t-la\nwc -l x") is None
    assert run("ls -la\nwc -l README.md").risk_class is RiskClass.READ
