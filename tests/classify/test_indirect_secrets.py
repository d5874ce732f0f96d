"""Secret paths reached indirectly (issue 18 and 13): through expansions, redirections inside
substitutions, argument files, globs and braces, /proc aliases, another account's home, a bare
`cd`, environment dumps, recursive readers, and the service's own data dir."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.classify.helpers import proposal, rules_of, run
from workflow.classify.engine import classify
from workflow.classify.targets import brace_words
from workflow.classify.taxonomy import Category, RiskClass

SECRETS = [
    "~/.ssh/id_rsa",
    "~/.aws/credentials",
    "~/.netrc",
    "~/.config/gh/hosts.yml",
    "/etc/shadow",
    "~/.docker/config.json",
]
FORMS = [
    'echo "$(< {p})"',
    "x=$(<{p}); echo ${{#x}}",
    "echo `cat < {p}`",
    'cat "${{K:-{p}}}"',
    "cat ${{K:={p}}}",
    "cat ${{K-{p}}}",
    "wc -c < ${{F:-{p}}}",
    'f={p}; cat "$f"',
    "f={p}; g=$f; cat $g",
    'for f in {p}; do cat "$f"; done',
    'f=$(echo {p}); cat "$f"',
    'a=(x {p}); cat "${{a[1]}}"',
    "find ~ /etc -name {last} -exec cat {{}} +",
    'printf -v f %s {p}; cat "$f"',
    'read -r f <<< {p}; cat "$f"',
    "cat $(printf '%s' {p})",
    "xargs -a {p} echo",
    "xargs --arg-file={p} echo",
    "parallel echo :::: {p}",
    "cat {bracketed}",
    "cat {braced}",
    "cat {questioned}",
    "cat /proc/self/root{absolute}",
    "cat /proc/1/root/proc/self/root{absolute}",
]


def _absolute(p: str) -> str:
    return "/home/agent" + p[1:] if p.startswith("~") else p


def _spellings(p: str, at: int) -> dict[str, str]:
    head, _, last = p.rpartition("/")
    i = at % len(last)
    return {
        "bracketed": f"{head}/{last[:i]}[{last[i]}]{last[i + 1 :]}",
        "braced": f"{head}/{{nothing,{last}}}",
        "questioned": f"{head}/{last[:i]}?{last[i + 1 :]}",
        "absolute": _absolute(p),
        "last": last,
    }


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FORMS), st.sampled_from(SECRETS), st.integers(min_value=0))
def test_a_secret_reached_indirectly_is_never_a_read(form: str, secret: str, at: int) -> None:
    command = form.format(p=secret, **_spellings(secret, at))
    result = run(command)
    assert result.risk_class is not RiskClass.READ, command
    assert Category.SECRET_ACCESS in result.categories, command


@pytest.mark.parametrize("home", ["/home/alice", "/Users/bob", "/root", "/var/root"])
@pytest.mark.parametrize(
    ("rest", "write"),
    [("/.ssh/id_rsa", False), ("/.aws/credentials", False), ("/.bashrc", True), (".", False)],
)
def test_any_accounts_home_is_protected_like_ours(home: str, rest: str, write: bool) -> None:
    if rest == ".":
        result = run(f"grep -r token {home}")
    elif write:
        result = run(f"echo 'alias ls=x' >> {home}{rest}")
    else:
        result = run(f"cat {home}{rest}")
    assert result.risk_class is not RiskClass.READ
    assert result.severity.value == "critical"


@pytest.mark.parametrize(
    "command",
    [
        "cd; cat .aws/credentials",
        "cd && cat .ssh/id_ed25519",
        "cd ~ && cat .netrc",
        "ps eww",
        "ps auxe",
        "jq -n env",
        "jq -n '$ENV.AWS_SECRET_ACCESS_KEY'",
        "awk 'BEGIN { for (k in ENVIRON) print k, ENVIRON[k] }'",
        "systemctl show-environment",
        "cat /proc/1/environ",
        "strings /proc/self/environ",
        "grep -r password ~",
        "grep -Rn key /",
        "rg --hidden -n token ~",
        "cat ~/.$X/id_rsa",
        "cat ~/.aw${S}/credentials",
    ],
)
def test_other_indirect_reads_of_secrets_are_not_reads(command: str) -> None:
    result = run(command)
    assert result.risk_class is not RiskClass.READ, (command, rules_of(result))


@pytest.mark.parametrize(
    "path",
    [
        "/home/agent/proj/.headgate/approver.seed",
        "/srv/app/.headgate/headgate.db",
        ".headgate/credentials/agent.nk",
        "/var/lib/headgate/notify.key",
        "/tmp/x/approver.seed",
        "/tmp/nats/user.creds",
    ],
)
def test_the_services_own_data_is_a_protected_secret(path: str) -> None:
    result = classify(proposal("read_file", {"path": path}))
    assert result.risk_class is not RiskClass.READ
    assert result.severity.value == "critical"
    written = classify(proposal("write_file", {"path": path, "content": "x"}))
    assert written.severity.value == "critical"


@pytest.mark.parametrize(
    "command",
    [
        "ls -d */",
        "cat *",
        "wc -l *.txt",
        'cat "$1"',
        'for f in *.py; do wc -l "$f"; done',
        "cd src; cat main.py",
        "grep -rn TODO src",
        "ps aux",
        "jq .name package.json",
        "echo {1..3}",
        "cat README.{md,rst}",
        "find . -name README.md -exec cat {} +",
        "find . -name '*.md' -exec cat {} +",
        'arr=(a.txt b.txt); cat "${arr[0]}"',
    ],
)
def test_everyday_reads_stay_reads(command: str) -> None:
    result = run(command)
    assert result.risk_class is RiskClass.READ, (command, rules_of(result))


def test_brace_expansion_is_bounded() -> None:
    assert brace_words("a{b,c}d{1..3}") == ["abd1", "abd2", "abd3", "acd1", "acd2", "acd3"]
    assert brace_words("x{1..100000}") is None
    assert brace_words("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}") is None
    assert run("cat x{1..100000}/.ssh/id_rsa").risk_class is not RiskClass.READ


@pytest.mark.parametrize("path", ["~/.netrc\x00.txt", "/home/agent/.pgpass\x00", "~/.env\x00x"])
def test_a_path_cut_by_nul_is_checked_where_c_cuts_it(path: str) -> None:
    result = classify(proposal("read_file", {"path": path}))
    assert Category.SECRET_ACCESS in result.categories
