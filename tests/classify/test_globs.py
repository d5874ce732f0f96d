"""The compiled path globs: the combined regex answers exactly like the globs one by one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflow.classify.tables import (
    DEFAULT_HUMAN_CONFIRM,
    DEFAULT_PROTECTED_READ,
    DEFAULT_PROTECTED_WRITE,
    ClassifierTables,
)
from workflow.classify.targets import GlobSet, compile_globs, path_rules

HOME = "/home/agent"
GLOB_LISTS = {
    "protected_read": DEFAULT_PROTECTED_READ,
    "protected_write": DEFAULT_PROTECTED_WRITE,
    "human_confirm": DEFAULT_HUMAN_CONFIRM,
    "rooted_only": ("/etc/**", "~/.bashrc", "/dev/sd*"),
    "anywhere_only": ("**/.env", "**/*.pem", "**/.git/hooks/**"),
    "empty": (),
}
# Segments that make the globs match somewhere, miss narrowly, or differ only in case.
SEGMENT = st.sampled_from(
    [
        "home",
        "agent",
        "root",
        "etc",
        "src",
        "pkg",
        "module_1.py",
        ".ssh",
        ".SSH",
        "id_rsa",
        "id_rsa.pub",
        ".env",
        ".env.local",
        "prod.env",
        "key.pem",
        ".git",
        "hooks",
        "config",
        ".aws",
        "credentials",
        "package.json",
        "settings.json",
        "Dockerfile",
        ".github",
        "workflows",
        "ci.yml",
        ".bashrc",
        "sda1",
        "dev",
        "shadow",
        "x",
        "",
    ]
)


def _one_by_one(globs: GlobSet, path: str) -> bool:
    return any(regex.fullmatch(path) for regex in globs.each)


@pytest.mark.parametrize("name", sorted(GLOB_LISTS))
@settings(max_examples=400, deadline=None)
@given(st.lists(SEGMENT, min_size=1, max_size=8))
def test_combined_regex_matches_exactly_when_one_glob_does(name: str, segments: list[str]) -> None:
    globs = compile_globs(GLOB_LISTS[name], HOME)
    path = "/" + "/".join(segments)
    assert bool(globs.combined.fullmatch(path)) == _one_by_one(globs, path), path
    hit = globs.match(path)
    assert hit == next(
        (p for p, r in zip(globs.patterns, globs.each, strict=True) if r.fullmatch(path)), None
    )


@pytest.mark.parametrize("name", sorted(GLOB_LISTS))
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="/.*?[]aAsSkK~_-\u017f\u212a", max_size=30))
def test_combined_regex_agrees_on_arbitrary_text(name: str, text: str) -> None:
    globs = compile_globs(GLOB_LISTS[name], HOME)
    assert bool(globs.combined.fullmatch(text)) == _one_by_one(globs, text), text


def test_path_rules_are_compiled_once_per_tables_object() -> None:
    tables = ClassifierTables()
    assert path_rules(tables) is path_rules(tables)


def test_path_rules_follow_a_changed_copy_of_the_tables() -> None:
    tables = ClassifierTables()
    before = path_rules(tables)
    changed = tables.model_copy(update={"extra_protected_read": ["**/secret.txt"]})
    assert path_rules(changed).protected_read.match("/home/agent/secret.txt") is not None
    assert before.protected_read.match("/home/agent/secret.txt") is None
    home = tables.model_copy(update={"home_dir": "/Users/me"})
    assert path_rules(home).home == "/Users/me"
    assert path_rules(home).protected_read.match("/Users/me/.bash_history") is not None
