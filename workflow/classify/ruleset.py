"""The registry of per-command danger rules: command name -> rule."""

from __future__ import annotations

from workflow.classify.archives import ARCHIVE_RULES
from workflow.classify.dryrun import dry_run
from workflow.classify.findings import finding
from workflow.classify.informational import is_informational
from workflow.classify.readers import read_command
from workflow.classify.readonly import READ_ONLY, READERS
from workflow.classify.rules import (
    EXEC,
    HIGH,
    NONE,
    N,
    Result,
    Rule,
    X,
    _dd,
    _positional,
    _rm,
    _simple,
    _sql_client,
    _truncation,
)
from workflow.classify.rules_system import SYSTEM_RULES
from workflow.classify.shellstate import ShellState, Word, shown
from workflow.classify.subcommands import CHANGES_SYSTEM, changes_system, read_subcommand
from workflow.classify.taxonomy import Category, RiskClass, Severity


def _tee(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    return ("write", frozenset(), _positional(args))


RULES: dict[str, Rule] = {
    **SYSTEM_RULES,
    **ARCHIVE_RULES,
    "rm": _rm,
    "unlink": _simple(
        "shell.unlink",
        "deletes a file",
        RiskClass.DESTRUCTIVE,
        Severity.MEDIUM,
        Category.DESTRUCTIVE,
    ),
    "shred": _truncation,
    "truncate": _truncation,
    "srm": _truncation,
    "dd": _dd,
    "tee": _tee,
    **{
        n: _sql_client
        for n in (
            "psql",
            "mysql",
            "mariadb",
            "sqlite3",
            "duckdb",
            "clickhouse-client",
            "cockroach",
            "mongosh",
            "mongo",
            "redis-cli",
            "sqlcmd",
        )
    },
}


#: Commands the classifier knows beyond its rules and readers: wrappers, shells,
#: interpreters and everyday development tools (for help and version flags).
KNOWN_TOOLS = frozenset(
    {"env", "nohup", "time", "nice", "ionice", "stdbuf", "setsid", "builtin", "exec", "unbuffer",
     "caffeinate", "strace", "ltrace", "flock", "timeout", "gtimeout", "xargs", "parallel",
     "watch", "sudo", "doas", "su", "pkexec", "run0", "chroot", "sh", "bash", "zsh", "dash",
     "ksh", "mksh", "ash", "fish", "tcsh", "csh", "busybox", "python", "python2", "python3",
     "perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua", "pwsh", "gcc", "g++", "cc",
     "clang", "clang++", "make", "cmake", "ninja", "ruff", "mypy", "black", "isort", "flake8",
     "eslint", "prettier", "tsc", "npx", "java", "javac", "rustc", "rustup", "openssl",
     "gpg", "ssh-keygen", "tar", "zip", "unzip", "gzip", "gunzip", "xz", "zstd", "bzip2",
     "ffmpeg", "convert", "pandoc", "vim", "nvim", "emacs", "nano", "code", "gdb", "lldb",
     "valgrind", "sqlite3", "poetry", "uv", "pipx", "cargo", "go", "dotnet", "terraform", "tofu",
     "ansible", "ansible-playbook", "kustomize", "jq", "yq", "hostnamectl", "timedatectl",
     "journalctl", "dmesg", "ss", "ip", "netstat", "top", "htop", "dpkg-query", "apt-cache"}
)  # fmt: skip


def informational(name: str, args: list[Word]) -> bool:
    """True when `name args` only prints help or a version, or is a harmless dry run."""
    known = name in RULES or name in READERS or name in KNOWN_TOOLS or name.startswith("mkfs.")
    return is_informational(name, args, known) or dry_run(name, args)


def apply(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    """Run the danger rule for `name`, if there is one."""
    if informational(name, args):
        return ("read", frozenset(), [])
    reader = READERS.get(name)
    if reader is not None:
        return read_command(reader, name, args, st)
    listed = read_subcommand(name, args, st)
    if listed is not None:
        return listed
    listing = READ_ONLY.get(name)
    if name in CHANGES_SYSTEM and (listing is None or not listing(args)):
        st.add(changes_system(name, args))
        return EXEC
    rule = RULES.get(name)
    if rule is None and name.startswith("mkfs"):
        rule = RULES["mkfs"]
    if rule is None:
        return NONE
    return rule(name, args, st, stdin_text)


def python_module(module: str, args: list[Word], st: ShellState) -> tuple[frozenset[str], bool]:
    """`python -m <module>`: a few modules are well known, the rest is exec. Returns the
    traits and whether the run was found to be a read (then it adds no exec of its own)."""
    if module in ("pip", "pip3", "uv", "poetry", "pipx"):
        said, traits, _ = apply(module, args, st, None)
        if said == "read":
            st.add(
                finding(
                    "shell.read_only",
                    f"`python -m {module} {shown(args)}` only reads (read, low).",
                    RiskClass.READ,
                    Severity.LOW,
                )
            )
            return traits, True
        return traits, False
    if module in ("http.server", "SimpleHTTPServer", "smtpd", "ftplib"):
        st.add(
            finding(
                "shell.python_server",
                f"`python -m {module}` serves or sends files over the network (network, high).",
                X,
                HIGH,
                N,
            )
        )
    return frozenset(), False
