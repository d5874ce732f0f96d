"""The built-in tool table and the operator's tables the classifier reads.

`ClassifierTables` is everything configurable about classification. The policy file embeds it
verbatim as its `[classifier]` section, so every field name below is a TOML key. `DEFAULT_TABLES`
is what ships.

Path globs: `**` matches any number of directories (including none), `*` and `?` match within
one path segment, `~/` is the `home_dir` below. Matching is case-insensitive (macOS file systems
are) and done on lexically normalised absolute paths: `..` is resolved, symlinks cannot be.
Command templates are argv patterns split on spaces: a token matches one argument (`*` and `?`
are globs within it), and a final `**` matches any remaining arguments.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from workflow.classify.agent_tools import AGENT_TOOLS
from workflow.classify.model import ModelClassifierConfig
from workflow.classify.taxonomy import Category, RiskClass, Severity


class ToolRule(BaseModel):
    """How a tool is classified by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    risk_class: RiskClass = Field(description="The tool's class when called by this name.")
    severity: Severity = Field(description="The tool's severity when called by this name.")
    categories: frozenset[Category] = Field(
        default=frozenset(), description="Categories the tool always carries."
    )
    takes_command: bool = Field(
        default=False, description="A shell tool: its class is what analysing the command finds."
    )


def _rule(risk: RiskClass, sev: Severity, *cats: Category, takes_command: bool = False) -> ToolRule:
    return ToolRule(
        risk_class=risk, severity=sev, categories=frozenset(cats), takes_command=takes_command
    )


R, EG, EX, W, X, D = (
    RiskClass.READ,
    RiskClass.EGRESS,
    RiskClass.EXTERNAL,
    RiskClass.WRITE_LOCAL,
    RiskClass.EXEC,
    RiskClass.DESTRUCTIVE,
)
LOW, MED, HIGH, CRIT = Severity.LOW, Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL
NET = Category.NETWORK

#: Tools known by name. Reviewed list: a tool missing here is unknown and fails closed.
BUILTIN_TOOLS: dict[str, ToolRule] = {
    **{n: _rule(r, s, *c, takes_command=t) for n, (r, s, c, t) in AGENT_TOOLS.items()},
    # reads
    "read_file": _rule(R, LOW),
    "read_multiple_files": _rule(R, LOW),
    "list_directory": _rule(R, LOW),
    "list_dir": _rule(R, LOW),
    "directory_tree": _rule(R, LOW),
    "glob": _rule(R, LOW),
    "grep": _rule(R, LOW),
    "search_files": _rule(R, LOW),
    "get_file_info": _rule(R, LOW),
    # local writes
    "write_file": _rule(W, MED),
    "edit_file": _rule(W, MED),
    "replace_in_file": _rule(W, MED),
    "apply_patch": _rule(W, MED),
    "create_directory": _rule(W, LOW),
    "move_file": _rule(W, MED),
    # destructive
    "delete_file": _rule(D, HIGH, Category.DESTRUCTIVE),
    "delete_directory": _rule(D, HIGH, Category.DESTRUCTIVE),
    # exec
    "run_shell": _rule(X, HIGH, takes_command=True),
    "bash": _rule(X, HIGH, takes_command=True),
    "shell": _rule(X, HIGH, takes_command=True),
    "run_python": _rule(X, HIGH),
    # egress
    "web_fetch": _rule(EG, MED, NET),
    "web_search": _rule(EG, MED, NET),
    "http_request": _rule(EX, HIGH, NET),
    # external side effects
    "send_email": _rule(EX, HIGH, NET),
    "send_message": _rule(EX, HIGH, NET),
    "create_issue": _rule(EX, MED, NET),
}

DEFAULT_PROTECTED_READ: tuple[str, ...] = (
    # ssh and gpg keys, key files wherever they are copied
    "**/.ssh/**",
    "**/id_rsa",
    "**/id_dsa",
    "**/id_ecdsa",
    "**/id_ed25519",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/*.keystore",
    "**/*.jks",
    "**/.gnupg/**",
    # dotenv files and other credential files
    "**/.env",
    "**/.env.*",
    "**/*.env",
    "**/.netrc",
    "**/_netrc",
    "**/.pgpass",
    "**/.my.cnf",
    "**/.git-credentials",
    "**/.npmrc",
    "**/.pypirc",
    "**/.docker/config.json",
    "**/.vault-token",
    "**/secrets.y*ml",
    "**/credentials.json",
    "**/*.tfstate",
    # cloud credentials
    "~/.aws/**",
    "**/.aws/credentials",
    "**/.aws/config",
    "**/.config/gcloud/**",
    "**/.azure/**",
    "~/.kube/config",
    "**/.kube/config",
    "~/.config/gh/hosts.yml",
    "~/.terraform.d/credentials.tfrc.json",
    # keychains and password stores
    "**/Library/Keychains/**",
    "~/.local/share/keyrings/**",
    "~/.password-store/**",
    "~/.config/op/**",
    # browser profiles (cookies, saved passwords)
    "~/.mozilla/**",
    "~/.config/google-chrome/**",
    "~/.config/chromium/**",
    "~/Library/Application Support/Google/Chrome/**",
    "~/Library/Application Support/Firefox/**",
    "~/Library/Cookies/**",
    # shell history holds typed secrets
    "~/.bash_history",
    "~/.zsh_history",
    "~/.python_history",
    "~/.psql_history",
    "~/.mysql_history",
    # system secrets
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/sudoers",
    "/etc/sudoers.d/**",
    "/etc/ssh/*_key",
    "/etc/ssl/private/**",
    "/root/**",
    "/proc/*/environ",
    "/proc/self/environ",
    "/var/run/secrets/**",
    "/run/secrets/**",
)

DEFAULT_PROTECTED_WRITE: tuple[str, ...] = (
    "**/.git/hooks/**",
    "**/.git/config",
    "~/.bashrc",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.bash_logout",
    "~/.profile",
    "~/.zshrc",
    "~/.zshenv",
    "~/.zprofile",
    "~/.zlogin",
    "~/.config/fish/**",
    "~/.inputrc",
    "~/.gitconfig",
    "~/.config/git/**",
    "~/.ssh/**",
    "~/.config/autostart/**",
    "~/.config/systemd/**",
    "~/Library/LaunchAgents/**",
    "~/.local/bin/**",
    "**/.vscode/tasks.json",
    "**/.envrc",
    "/etc/**",
    "/usr/**",
    "/bin/**",
    "/sbin/**",
    "/lib/**",
    "/lib64/**",
    "/boot/**",
    "/var/spool/cron/**",
    "/Library/LaunchDaemons/**",
    "/Library/LaunchAgents/**",
    "/dev/sd*",
    "/dev/nvme*",
    "/dev/disk*",
    "/dev/mem",
)

DEFAULT_HUMAN_CONFIRM: tuple[str, ...] = (
    "**/*settings*.json",
    "**/pyproject.toml",
    "**/setup.py",
    "**/setup.cfg",
    "**/requirements*.txt",
    "**/package.json",
    "**/package-lock.json",
    "**/Cargo.toml",
    "**/go.mod",
    "**/Gemfile",
    "**/Makefile",
    "**/.github/workflows/**",
    "**/.gitlab-ci.yml",
    "**/.circleci/**",
    "**/Jenkinsfile",
    "**/azure-pipelines.yml",
    "**/Dockerfile",
    "**/Dockerfile.*",
    "**/*.dockerfile",
    "**/docker-compose*.y*ml",
    "**/compose.y*ml",
    "**/.pre-commit-config.yaml",
    "**/conftest.py",
    "**/.gitignore",
    "**/.gitattributes",
    "**/CODEOWNERS",
    "**/.mcp.json",
    "**/.claude/**",
    "**/AGENTS.md",
    "**/CLAUDE.md",
)

DEFAULT_TRUSTED_HOSTS: tuple[str, ...] = (
    "github.com",
    "api.github.com",
    "raw.githubusercontent.com",
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "docs.python.org",
)

DEFAULT_READ_TEMPLATES: tuple[str, ...] = (
    "python --version",
    "python3 --version",
    "node --version",
    "npm --version",
    "go version",
    "cargo --version",
    "rustc --version",
)
# `pip list`, `npm ls`, `make -n`, `docker ps`, `kubectl get` ... are judged by their option
# grammars (subcommands.py, dryrun.py): a template would also pass `kubectl get pods
# --kubeconfig=./x` (whose exec plugins run programs) or `make -n --eval=...`.

DEFAULT_EXEC_TEMPLATES: tuple[str, ...] = (
    "pytest **",
    "python -m pytest **",
    "python3 -m pytest **",
    "npm test",
    "npm run test",
    "npm run lint",
    "npm run build",
    "make",
    "make test",
    "make lint",
    "make build",
    "cargo build **",
    "cargo test **",
    "cargo check **",
    "go build **",
    "go test **",
    "go vet **",
    "ruff check **",
    "ruff format **",
    "mypy **",
    "tsc **",
)


class ClassifierTables(BaseModel):
    """Operator-configurable classification tables: the policy file's `[classifier]` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    overrides: dict[str, ToolRule] = Field(
        default_factory=dict,
        description="Per-tool rules by tool name. For a built-in tool they may only tighten it "
        "(a loosening override is ignored); for any other tool they set its class.",
    )
    pinned: dict[str, str] = Field(
        default_factory=dict,
        description="Tool name -> sha256 of its definition (description, input schema, "
        "annotations). A tool whose definition hashes differently is treated as unknown.",
    )
    shell_tools: list[str] = Field(
        default_factory=lambda: ["run_shell", "bash", "shell"],
        description="Tools whose `command` argument is a shell command to analyse. Tools with "
        "`takes_command = true` in `overrides` are shell tools too.",
    )
    protected_read: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROTECTED_READ),
        description="Path globs whose contents are secrets: touching them is critical "
        "(secret_access). Setting this replaces the shipped list; to add, use "
        "`extra_protected_read`.",
    )
    extra_protected_read: list[str] = Field(
        default_factory=list, description="More protected-read globs, added to `protected_read`."
    )
    protected_write: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROTECTED_WRITE),
        description="Path globs where writing or executing is critical (git hooks, shell rc "
        "files, /etc, ...). Setting this replaces the shipped list; to add, use "
        "`extra_protected_write`.",
    )
    extra_protected_write: list[str] = Field(
        default_factory=list,
        description="More protected-write globs, added to `protected_write`.",
    )
    human_confirm: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HUMAN_CONFIRM),
        description="Path globs where a write is at least high (settings, build and CI config). "
        "Setting this replaces the shipped list; to add, use `extra_human_confirm`.",
    )
    extra_human_confirm: list[str] = Field(
        default_factory=list, description="More human-confirm globs, added to `human_confirm`."
    )
    trusted_hosts: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TRUSTED_HOSTS),
        description="Hosts egress to which is medium instead of high. Exact names (compared "
        "after IDNA encoding); `*.example.com` trusts subdomains of example.com. IP literals "
        "are trusted only when listed exactly.",
    )
    read_command_templates: list[str] = Field(
        default_factory=lambda: list(DEFAULT_READ_TEMPLATES),
        description="Shell argv templates the operator declares read-only (read, low), e.g. "
        "`pip list **`. Built-in danger rules and protected paths still apply.",
    )
    exec_command_templates: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EXEC_TEMPLATES),
        description="Shell argv templates the operator accepts as templated exec (exec, "
        "medium) instead of un-templated exec (high), e.g. `pytest **`.",
    )
    home_dir: str = Field(
        default="/home/agent",
        description="The agent's home directory, used to expand `~` and `$HOME` in arguments "
        "and in globs, and as the working directory when a proposal gives none. The "
        "classifier is pure and never reads the real environment, so set this to the home of "
        "the account the agent runs as.",
    )
    model_classifier: ModelClassifierConfig | None = Field(
        default=None,
        description="Optional raise-only model check for shell commands (off by default).",
    )

    def is_shell_tool(self, tool: str) -> bool:
        """True for a tool whose class is what analysing its command finds."""
        if tool in self.shell_tools:
            return True
        builtin, override = BUILTIN_TOOLS.get(tool), self.overrides.get(tool)
        return bool((builtin and builtin.takes_command) or (override and override.takes_command))


DEFAULT_TABLES = ClassifierTables()
