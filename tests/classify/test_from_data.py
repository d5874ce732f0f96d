"""Commands assembled from data: xargs, parallel, find -exec and pipes into a shell (issue 18).
A shell or an interpreter run on data fails closed whatever feeds it; replacement strings make
the words holding them unknown; input files go through the path rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.classify.helpers import rules_of, run
from workflow.classify.commands import INTERPRETERS, SHELLS
from workflow.classify.taxonomy import RiskClass, Severity

FEEDERS = ["cat cmds.txt | ", "git ls-files -z | ", "find . -print0 | ", ""]
RUNNERS = [
    "xargs {i}",
    "xargs -n1 {i}",
    "xargs -0 -I{{}} {i}",
    "xargs -I % {i}",
    "xargs -i {i}",
    "xargs --replace=@ {i}",
    "xargs -a jobs.txt {i}",
    "xargs --arg-file jobs.txt -P4 {i}",
    "xargs -d '\\n' -L1 {i}",
    "xargs -r env {i}",
    "xargs timeout 5 {i}",
    "parallel {i}",
    "parallel -j4 {i} ::: a b",
    "parallel --colsep , {i} :::: list.txt",
    "find . -name '*.sh' -exec {i} \\;",
    "find . -execdir {i} {{}} +",
    "find . -ok {i} \\;",
    "find . -okdir {i} \\;",
]
CODE = ["", " -c", " -c '{}'", " -c 'wc -l \"{}\"'", " -e", " script.x", " -"]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(FEEDERS),
    st.sampled_from(RUNNERS),
    st.sampled_from(sorted(SHELLS | INTERPRETERS)),
    st.sampled_from(CODE),
)
def test_a_shell_or_interpreter_run_on_data_is_never_a_read(
    feeder: str, runner: str, interpreter: str, code: str
) -> None:
    command = feeder + runner.format(i=interpreter + code)
    result = run(command)
    assert result.risk_class is not RiskClass.READ, command
    assert result.fail_closed or result.severity.rank >= Severity.HIGH.rank, command


@pytest.mark.parametrize(
    "command",
    [
        "cat jobs.txt | parallel",
        "parallel < jobs.txt",
        "parallel ::: 'rm -rf x' id",
        "parallel 'rm -f {}; id' ::: a",
        "printf '%s\\n' id whoami | sh",
        "printf 'id\\n' | bash",
        "echo -e 'id\\nwhoami' | sh",
        "echo ls | bash",
        "bash <<< 'ls'",
        "find . -exec sh -c 'cat {}' \\;",
    ],
)
def test_text_run_as_commands_is_not_a_read(command: str) -> None:
    assert run(command).risk_class is not RiskClass.READ, command


@pytest.mark.parametrize(
    "command",
    [
        "xargs -a ~/.ssh/id_rsa echo",
        "xargs --arg-file=/home/agent/.pgpass -n1 echo",
        "xargs --arg-file ~/.aws/credentials echo",
        "parallel -a ~/.netrc echo",
        "parallel echo :::: ~/.ssh/id_ed25519",
    ],
)
def test_an_input_file_is_checked_as_a_read(command: str) -> None:
    result = run(command)
    assert "target.protected_read" in rules_of(result), command


@pytest.mark.parametrize(
    "command",
    [
        "find . -name '*.py' -exec wc -l {} +",
        "find . -type f | xargs grep -n TODO",
        "git ls-files | xargs wc -l",
        "xargs --version",
        "parallel --version",
    ],
)
def test_readers_fed_by_data_stay_reads(command: str) -> None:
    result = run(command)
    assert result.risk_class is RiskClass.READ, (command, rules_of(result))


def test_parallel_on_remote_hosts_is_network() -> None:
    assert "shell.parallel_remote" in rules_of(run("parallel -S host1 uptime ::: a"))
