"""Finding paths, URLs and hosts in a tool call's arguments (for the target rules)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from workflow.classify.hosts import URL_RE

PATH_KEYS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "file_path",
        "filepath",
        "filename",
        "file_name",
        "target",
        "targets",
        "source",
        "sources",
        "src",
        "dest",
        "destination",
        "dst",
        "dir",
        "dirs",
        "directory",
        "directories",
        "cwd",
        "workdir",
        "working_directory",
        "folder",
        "root",
        "output",
        "output_path",
        "input",
        "input_path",
        "from",
        "to",
        "old_path",
        "new_path",
        "location",
        "notebook_path",
        "script",
        "config",
        "config_path",
    }
)
_PATH_SUFFIXES = ("_path", "_paths", "_file", "_files", "_dir", "_directory", "_filename")
URL_KEYS = frozenset(
    {
        "url",
        "urls",
        "uri",
        "uris",
        "endpoint",
        "href",
        "link",
        "links",
        "base_url",
        "webhook",
        "callback",
        "server_url",
        "repository",
    }
)
HOST_KEYS = frozenset({"host", "hostname", "domain", "server", "remote_host"})
_LOOKS_LIKE_PATH = re.compile(r"^(?:/|~/|~$|\./|\.\./|\$HOME\b|file://)\S*$")
MAX_DEPTH = 6
MAX_ITEMS = 2000


#: A path, URL or host value longer than this is not inspected: the call fails closed.
MAX_TARGET_CHARS = 4096


@dataclass
class ArgumentTargets:
    paths: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    #: Why some of the arguments were not inspected (too many items, nested too deep, a
    #: target too long), or None when every value was. The caller fails closed on it.
    overflow: str | None = None


def _key_kind(key: str) -> str | None:
    k = key.lower()
    if k in PATH_KEYS or k.endswith(_PATH_SUFFIXES):
        return "path"
    if k in URL_KEYS or k.endswith(("_url", "_uri", "_urls", "_endpoint")):
        return "url"
    if k in HOST_KEYS or k.endswith("_host"):
        return "host"
    return None


def _visit(value: Any, kind: str | None, out: ArgumentTargets, depth: int) -> None:
    if out.overflow is not None:
        return
    if depth > MAX_DEPTH:
        if value:
            out.overflow = f"values nested more than {MAX_DEPTH} levels deep"
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _visit(v, _key_kind(str(k)) or (kind if depth else None), out, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _visit(v, kind, out, depth + 1)
    elif isinstance(value, str) and value:
        if len(value) >= MAX_TARGET_CHARS:
            # Prose under a path-like key (`input`, `source`) is not a target; one long word
            # there is, and it is too long to inspect.
            if kind is not None and not any(c.isspace() for c in value[:MAX_TARGET_CHARS]):
                out.overflow = f"a {kind} longer than {MAX_TARGET_CHARS} characters"
        elif kind is not None or "\n" not in value:
            _add(value, kind, out)


def _add(value: str, kind: str | None, out: ArgumentTargets) -> None:
    if URL_RE.match(value) and not value.startswith("file://"):
        found = out.urls
    elif kind == "url":
        found, value = out.urls, value if "://" in value else "https://" + value
    elif kind == "host":
        found = out.hosts
    elif kind == "path" or _LOOKS_LIKE_PATH.match(value):
        found = out.paths
    else:
        return
    if len(out.paths) + len(out.urls) + len(out.hosts) >= MAX_ITEMS:
        out.overflow = f"more than {MAX_ITEMS} paths, URLs or hosts"
        return
    found.append(value)


def argument_targets(
    arguments: dict[str, Any], skip: frozenset[str] = frozenset()
) -> ArgumentTargets:
    """Paths, URLs and hosts in the arguments, found by key name and by shape."""
    out = ArgumentTargets()
    _visit({k: v for k, v in arguments.items() if k not in skip}, None, out, 0)
    return out
