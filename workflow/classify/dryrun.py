"""Dry runs that only print what they would do: `make -n`, `rsync -n`, `terraform plan`,
`parallel --dry-run` (kubectl's `--dry-run`, `apt-get -s` and `helm template` are with their
tools in `subcommands.py`; `git clean -n` with git).

Each is a read only without what acts even in a dry run:
- `make -n` still reads its makefiles and expands them, so `--eval`, another makefile (`-f`)
  and variable overrides on the command line (`SHELL=…`, `MAKE=…`) keep it out. (GNU make
  also runs, even under `-n`, recipe lines that use `$(MAKE)` or start with `+`, and the
  `$(shell …)` of the project's own makefile: a dry run of the checked-out makefile is taken as
  the read its manual calls it.)
- `rsync -n` still connects to a remote side and runs the program of `-e`/`--rsh`; it also
  writes `--log-file` and batch files. Only a local-to-local dry run is a read.
- `terraform plan` writes a plan with `-out` and configuration with `-generate-config-out`.
"""

from __future__ import annotations

import re

from workflow.classify.shellstate import Word

_MAKE_DRY = frozenset({"-n", "--just-print", "--dry-run", "--recon"})
_MAKE_UNSAFE_LONG = ("--eval", "--file", "--makefile")
_RSYNC_UNSAFE = (
    "--rsh",
    "--rsync-path",
    "--log-file",
    "--write-batch",
    "--only-write-batch",
    "--read-batch",
    "--password-file",
    "--daemon",
    "--server",
    "--sender",
    "--config",
    "--early-input",
    "--remote-option",
    "--port",
    "--sockopts",
)
_REMOTE = re.compile(r"^[^/]*::|^rsync://|^[^/:]+:")


def _short_has(v: str, letters: str) -> bool:
    return len(v) > 1 and v[0] == "-" and v[1] != "-" and bool(set(v[1:]) & set(letters))


def _long_prefix(v: str, names: tuple[str, ...]) -> bool:
    name = v.split("=", 1)[0]
    return v.startswith("--") and len(name) > 2 and any(n.startswith(name) for n in names)


def _make(vals: list[str]) -> bool:
    dry = any(
        v in _MAKE_DRY or (_short_has(v, "n") and not _short_has(v, "CfEIjloOW")) for v in vals
    )
    if not dry:
        return False
    for v in vals:
        if _long_prefix(v, _MAKE_UNSAFE_LONG) or _short_has(v, "fE"):
            return False
        if not v.startswith("-") and "=" in v:
            return False
    return True


def _rsync(vals: list[str]) -> bool:
    dry = "--dry-run" in vals or any(_short_has(v, "n") for v in vals)
    if not dry:
        return False
    for v in vals:
        if _long_prefix(v, _RSYNC_UNSAFE) or _short_has(v, "eM"):
            return False
        if not v.startswith("-") and _REMOTE.match(v):
            return False
    return True


def _terraform(vals: list[str]) -> bool:
    rest = [v for v in vals if not v.startswith("-chdir=")]
    if rest[:1] != ["plan"]:
        return False
    return not any(v.lstrip("-").split("=", 1)[0] in ("out", "generate-config-out") for v in rest)


def dry_run(name: str, args: list[Word]) -> bool:
    """True when `name args` is a dry run that only prints (see the module docstring)."""
    if any(a.value is None for a in args):
        return False
    vals = [a.text for a in args]
    if name in ("make", "gmake"):
        return _make(vals)
    if name == "rsync":
        return _rsync(vals)
    if name in ("terraform", "tofu"):
        return _terraform(vals)
    if name == "parallel":
        return "--dry-run" in vals
    return False
