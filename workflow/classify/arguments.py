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


@dataclass
class ArgumentTargets:
    paths: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


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
    if len(out.paths) + len(out.urls) + len(out.hosts) > MAX_ITEMS or depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            _visit(v, _key_kind(str(k)) or (kind if depth else None), out, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _visit(v, kind, out, depth + 1)
    elif isinstance(value, str) and value and "\n" not in value and len(value) < 4096:
        if URL_RE.match(value) and not value.startswith("file://"):
            out.urls.append(value)
        elif kind == "url":
            out.urls.append(value if "://" in value else "https://" + value)
        elif kind == "host":
            out.hosts.append(value)
        elif kind == "path" or _LOOKS_LIKE_PATH.match(value):
            out.paths.append(value)


def argument_targets(
    arguments: dict[str, Any], skip: frozenset[str] = frozenset()
) -> ArgumentTargets:
    """Paths, URLs and hosts in the arguments, found by key name and by shape."""
    out = ArgumentTargets()
    _visit({k: v for k, v in arguments.items() if k not in skip}, None, out, 0)
    return out
