"""Informational and dry-run invocations: a known command asked for its help or version, or
told to show what it would do without doing it.

`--help`, `--version` (and `-help`, `-version`, `--usage`) alone, or after a subcommand name
(`git push --help`, `docker run --help`), make a known program print and exit. The short forms
`-h`, `-V`, `-v` mean other things to other programs (`shutdown -h` halts the machine, `sh -v`
starts a shell), so they count only for the programs listed as using them for help or version.

Dry runs (`make -n`, `rsync -n`, `apt-get -s`, `kubectl ... --dry-run=client`, `terraform
plan`, `helm template`, `parallel --dry-run`) are reads only without the options that act even
in a dry run: `make --eval`/`-f`/variable overrides, `rsync -e` or a remote side, `apt-get -o`,
`terraform plan -out`, `helm template --post-renderer` or a remote chart. `pip install
--dry-run` is not one: pip still downloads the distributions and, for source distributions,
runs their build backend to learn their metadata — code from the network runs.
"""

from __future__ import annotations

import re

from workflow.classify.shellstate import Word

LONG_HELP = frozenset({"--help", "--version", "-help", "-version", "--usage"})
#: Programs whose `-h` alone prints help.
SHORT_HELP = frozenset(
    {
        "sudo", "curl", "apt-get", "apt", "apt-cache", "pip", "pip3", "kubectl", "helm", "docker",
        "podman", "gh", "git", "rg", "fd", "bat", "jq", "yq", "nc", "ncat", "wget", "rsync",
        "terraform", "tofu", "npm", "uv", "ruff", "node", "python", "python3", "xz",
        "gzip", "zstd", "unzip", "psql", "mysql", "sqlite3", "redis-cli", "ssh-keygen", "aws",
        "gcloud", "az",
    }
)  # fmt: skip
#: Programs whose `-V` alone prints their version.
SHORT_V = frozenset(
    {
        "curl", "ssh", "scp", "sftp", "rsync", "wget", "iptables", "ip6tables", "sudo", "python",
        "python3", "pip", "pip3", "psql", "rg", "fd", "bat", "xz", "gzip", "zstd", "mke2fs",
        "mkfs", "mkfs.ext2", "mkfs.ext3", "mkfs.ext4", "tar", "gawk", "awk", "ps", "free",
        "systemctl", "nmap", "sed", "grep", "ruff", "jq", "yq", "lsof", "openssl",
    }
)  # fmt: skip
#: Programs whose `-v` alone prints their version.
SHORT_LOWER_V = frozenset(
    {"make", "docker", "podman", "node", "npm", "yarn", "pnpm", "deno", "bun", "gcc", "g++",
     "clang", "cargo", "rustc", "helm", "tofu", "terraform", "lsof", "ncat"}
)  # fmt: skip
#: Programs with a `version` subcommand that only prints.
VERSION_WORD = frozenset(
    {"terraform", "tofu", "helm", "openssl", "go", "docker", "podman", "gh", "pulumi", "flyctl",
     "doctl", "az", "cargo", "rustup", "kubectl", "poetry", "uv", "conda", "glab"}
)  # fmt: skip
#: Programs with `help [topic]` that only prints.
HELP_WORD = frozenset(
    {"git", "go", "helm", "kubectl", "docker", "podman", "npm", "pip", "pip3", "terraform",
     "tofu", "cargo", "gh", "uv", "poetry", "apt", "systemctl", "ip"}
)  # fmt: skip
#: Subcommands that are groups (`docker compose up --help`): a second word may follow.
GROUPS = frozenset(
    {"compose", "container", "image", "network", "volume", "system", "config", "rollout",
     "auth", "buildx", "context", "builder", "plugin", "stack", "service", "secret", "node",
     "trust", "manifest", "pr", "issue", "repo", "workflow", "release", "s3", "ec2",
     "iam", "cache", "mod", "env", "workspace", "state", "remote", "stash", "submodule",
     "worktree", "notes", "reflog", "pip", "tool", "python", "dependency"}
)  # fmt: skip
#: Programs whose first words are their own subcommands, which handle `--help` themselves
#: (a wrapper or an interpreter would run the next word as a program instead).
SUBCOMMAND_TOOLS = frozenset(
    {"git", "docker", "podman", "kubectl", "helm", "terraform", "tofu", "pip", "pip3", "npm",
     "pnpm", "cargo", "go", "uv", "poetry", "gh", "glab", "aws", "gcloud", "az", "apt",
     "apt-get", "apt-cache", "systemctl", "conda", "brew", "gem", "bundle",
     "dotnet", "make", "ip", "flyctl", "doctl", "pulumi", "vercel", "heroku", "openssl"}
)  # fmt: skip
#: Never informational: the machine's power commands (`shutdown -h` halts), and programs that
#: load project code before they look at their options: pytest (conftest.py, plugins), yarn
#: (the project's `.yarn/plugins`), composer (the project's plugins).
NEVER_INFORMATIONAL = frozenset(
    {
        "shutdown",
        "reboot",
        "halt",
        "poweroff",
        "init",
        "telinit",
        "format",
        "pytest",
        "py.test",
        "yarn",
        "composer",
    }
)
_WORD = re.compile(r"[a-z][a-z0-9-]*")


def is_informational(name: str, args: list[Word], known: bool) -> bool:
    """True when `name args` only prints help or a version (see the module docstring)."""
    if not known or name in NEVER_INFORMATIONAL or not args or any(a.value is None for a in args):
        return False
    vals = [a.text for a in args]
    if len(vals) == 1:
        flag = vals[0]
        if flag in LONG_HELP:
            return True
        if (
            (flag == "-h" and name in SHORT_HELP)
            or (flag == "-V" and (name in SHORT_V or name.startswith("mkfs.")))
            or (flag == "-v" and name in SHORT_LOWER_V)
        ):
            return True
        if flag == "version" and name in VERSION_WORD:
            return True
    if name in ("aws", "az") and vals[-1] == "help" and len(vals) <= 3:  # `aws s3 help`
        return all(_WORD.fullmatch(v) for v in vals)
    if name in HELP_WORD and vals[0] == "help" and len(vals) <= 3:
        return all(_WORD.fullmatch(v) for v in vals[1:])
    if name == "kubectl" and vals == ["version", "--client"]:
        return True
    if vals[-1] not in ("--help", "-help", "-h") or (vals[-1] == "-h" and name not in SHORT_HELP):
        return False
    words = vals[:-1]
    if name not in SUBCOMMAND_TOOLS or not words or not all(_WORD.fullmatch(w) for w in words):
        return False
    return len(words) == 1 or (len(words) == 2 and words[0] in GROUPS)
