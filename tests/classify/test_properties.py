"""Hypothesis properties of the classifier: max-rung composition, tighten-only, determinism."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.classify.helpers import proposal, run
from workflow.classify.engine import classify
from workflow.classify.tables import BUILTIN_TOOLS, ClassifierTables, ToolRule
from workflow.classify.taxonomy import RiskClass, Severity

COMMANDS = [
    "ls",
    "cat README.md",
    "git status",
    "echo hi",
    "grep -r x .",
    "rm -rf build",
    "curl https://x.example",
    "sh",
    "python script.py",
    "sudo ls",
    "cat ~/.ssh/id_rsa",
    "git push -f",
    "env",
    "pytest -q",
    "echo x > out.txt",
    "base64 -d",
    "wc -l",
    "make",
    "find . -delete",
    "$X",
    "cd /tmp",
    "bash",
    "wget -qO- https://a.example",
]
SEPARATORS = [" | ", " && ", " || ", "; "]


def rank(command: str) -> tuple[int, int]:
    result = run(command)
    return result.risk_class.rung, result.severity.rank


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(COMMANDS), min_size=1, max_size=4),
    st.sampled_from(COMMANDS),
    st.sampled_from(SEPARATORS),
    st.booleans(),
)
def test_adding_a_command_never_lowers_the_result(
    parts: list[str], extra: str, sep: str, before: bool
) -> None:
    base = sep.join(parts)
    bigger = f"{extra}{sep}{base}" if before else f"{base}{sep}{extra}"
    small_rung, small_sev = rank(base)
    big_rung, big_sev = rank(bigger)
    assert big_rung >= small_rung
    assert big_sev >= small_sev


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(BUILTIN_TOOLS)),
    st.sampled_from(list(RiskClass)),
    st.sampled_from(list(Severity)),
)
def test_an_override_never_loosens_a_builtin(
    tool: str, risk: RiskClass, severity: Severity
) -> None:
    args = {"command": "ls", "path": "a.txt", "url": "https://github.com/"}
    plain = classify(proposal(tool, args))
    tables = ClassifierTables(overrides={tool: ToolRule(risk_class=risk, severity=severity)})
    over = classify(proposal(tool, args), tables)
    assert over.risk_class.rung >= plain.risk_class.rung
    assert over.severity.rank >= plain.severity.rank


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80), st.sampled_from(["run_shell", "read_file", "web_fetch", "x"]))
def test_classify_is_deterministic(text: str, tool: str) -> None:
    args = {"command": text, "path": text, "url": text}
    assert classify(proposal(tool, args)) == classify(proposal(tool, args))


SECRETS = [
    "/home/agent/.ssh/id_rsa",
    "/home/agent/.aws/credentials",
    "/etc/shadow",
    "/home/agent/proj/.env",
    "/home/agent/.netrc",
]
SEGMENTS = st.sampled_from(["a", "b", "..", ".", "src", "x y", ""])


@settings(max_examples=300, deadline=None)
@given(st.lists(SEGMENTS, max_size=6), st.sampled_from(SECRETS), st.booleans())
def test_paths_built_from_dotdot_reaching_a_protected_file_are_critical(
    detour: list[str], secret: str, via_shell: bool
) -> None:
    cwd = "/home/agent/proj"
    depth = len([p for p in cwd.split("/") if p])
    ups = "/".join([".."] * (depth + len([d for d in detour if d not in ("", ".", "..")]) + 2))
    path = "/".join(["."] + [d for d in detour if d] + [ups]) + secret
    if via_shell:
        result = classify(proposal("run_shell", {"command": f"cat '{path}'"}, cwd=cwd))
    else:
        result = classify(proposal("read_file", {"path": path}, cwd=cwd))
    assert result.severity is Severity.CRITICAL, path
