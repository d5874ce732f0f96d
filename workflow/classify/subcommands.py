"""Read-only subcommands of container, cluster, service, network and package tools.

`kubectl get`, `docker ps`, `systemctl status`, `ip addr`, `npm ls`, `pip show`, `apt list`,
`helm list` only print. Each tool lists the subcommand paths that only read, the options that
take a separate value (so a value is never taken for a subcommand: `kubectl -n get pods`), and
the options that make any invocation more than a read: another server or credentials
(`kubectl --server`, `--kubeconfig`, whose exec plugins run programs; `docker -H`), raw output of
secrets (`kubectl get secret -o yaml`, `kubectl config view --raw`), writes (`pip --log`).

Reads of the cluster or daemon the operator configured count as reads (the data flows in, to
the agent); the evidence set labels them so (`kubectl get pods`, `docker logs`). Subcommands
that ask a package registry (`npm view`, `npm outdated`, `pip index`, `pip list --outdated`)
are egress; `git remote show NAME` and `git ls-remote` are handled with git.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from workflow.classify.findings import Finding, finding
from workflow.classify.hosts import url_findings
from workflow.classify.shellstate import FETCH, ShellState, Word, shown
from workflow.classify.targets import Access, check_path
from workflow.classify.taxonomy import Category, RiskClass, Severity

Result = tuple[str | None, frozenset[str], list[Word] | None]


@dataclass(frozen=True)
class Line:
    """A tool's words split into subcommand words and options (name -> value or "")."""

    words: tuple[str, ...]
    options: dict[str, str] = field(default_factory=dict)

    def has(self, *names: str) -> bool:
        return any(n in self.options for n in names)

    def short(self, letter: str) -> bool:
        """A short flag, alone or in a cluster (`-s`, `-sy`)."""
        return any(
            len(o) > 1 and o[0] == "-" and o[1] != "-" and letter in o[1:] for o in self.options
        )


def split(args: list[Word], values: frozenset[str]) -> Line | None:
    """None when a word is only known at run time."""
    words: list[str] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        w = args[i]
        if w.value is None:
            return None
        t = w.value
        i += 1
        if t == "--":
            words.extend(a.text for a in args[i:])
            break
        if t.startswith("-") and len(t) > 1:
            name, eq, value = t.partition("=")
            if not eq and not t.startswith("--") and len(t) > 2 and t[:2] in values:
                name, value = t[:2], t[2:]  # an attached value: `-oyaml`
            elif not eq and name in values and i < len(args):
                value = args[i].text
                i += 1
            options[name] = value
        else:
            words.append(t)
    return Line(tuple(words), options)


Check = Callable[[Line], bool]


@dataclass(frozen=True)
class Tool:
    values: frozenset[str]
    reads: frozenset[tuple[str, ...]]
    #: Options after which nothing is a read.
    unsafe: frozenset[str] = frozenset()
    #: Extra condition on a read (False: not a read after all).
    check: Check | None = None
    #: Subcommands that only ask a registry or remote service: egress.
    egress: frozenset[tuple[str, ...]] = frozenset()
    #: Options whose value is a file it reads (its contents can reach the output).
    files: frozenset[str] = frozenset()


def _matches(words: tuple[str, ...], paths: frozenset[tuple[str, ...]]) -> bool:
    """`words` start with one of `paths`; the empty path matches no words only, and `*` any."""
    return any((words[: len(p)] == p) if p else not words for p in paths) or ("*",) in paths


def _paths(*items: str) -> frozenset[tuple[str, ...]]:
    return frozenset(tuple(item.split()) for item in items)


# --------------------------------------------------------------------------- cluster

_KUBE_DRY_RUN = frozenset({"", "client", "server", "true"})


def _kubectl(line: Line) -> bool:
    if line.words[:1] == ("get",):
        kinds = ",".join(line.words[1:2]).lower()
        raw_output = line.options.get("-o", line.options.get("--output", "name"))
        if "secret" in kinds and (raw_output not in ("name", "wide") or line.has("--template")):
            return False
    if line.words[:2] == ("config", "view") and line.has("--raw", "--flatten"):
        return False
    return True


_KUBECTL = Tool(
    values=frozenset(
        {
            "-n",
            "--namespace",
            "--context",
            "--cluster",
            "--user",
            "-l",
            "--selector",
            "-o",
            "--output",
            "--sort-by",
            "--field-selector",
            "-c",
            "--container",
            "--tail",
            "--since",
            "--since-time",
            "-f",
            "--filename",
            "--template",
            "-L",
            "--label-columns",
            "--chunk-size",
            "--request-timeout",
            "--revision",
            "--subresource",
        }
    ),
    reads=_paths(
        "get",
        "describe",
        "logs",
        "top",
        "explain",
        "api-resources",
        "api-versions",
        "cluster-info",
        "version",
        "auth can-i",
        "auth whoami",
        "config current-context",
        "config get-contexts",
        "config get-clusters",
        "config get-users",
        "config view",
        "rollout status",
        "rollout history",
        "events",
    ),
    unsafe=frozenset(
        {
            "--kubeconfig",
            "-s",
            "--server",
            "--token",
            "--as",
            "--as-group",
            "--as-uid",
            "--raw",
            "--username",
            "--password",
            "--client-key",
            "--client-certificate",
            "--certificate-authority",
            "--output-directory",
            "--tls-server-name",
        }
    ),
    check=_kubectl,
    files=frozenset({"-f", "--filename"}),
)

_LOCAL_CHART = re.compile(r"^(\.{1,2}(/|$)|/|~)|^[\w.-]+$")


def _helm(line: Line) -> bool:
    if line.words[:1] in (("template",), ("show",), ("inspect",), ("lint",)):
        chart = [w for w in line.words[1:] if w not in ("all", "chart", "readme", "values", "crds")]
        return bool(chart) and _LOCAL_CHART.match(chart[-1]) is not None
    return True


_HELM = Tool(
    values=frozenset(
        {
            "-n",
            "--namespace",
            "--kube-context",
            "-o",
            "--output",
            "-f",
            "--values",
            "--set",
            "--set-string",
            "--set-json",
            "--version",
            "--max",
            "--offset",
            "--filter",
            "--revision",
            "--api-versions",
            "--kube-version",
            "-s",
            "--show-only",
            "--name-template",
            "--release-name",
        }
    ),
    reads=_paths(
        "list",
        "ls",
        "status",
        "history",
        "get",
        "show",
        "inspect",
        "version",
        "env",
        "search repo",
        "lint",
        "template",
        "dependency list",
        "dep list",
        "repo list",
        "plugin list",
    ),
    unsafe=frozenset(
        {
            "--kubeconfig",
            "--post-renderer",
            "--post-renderer-args",
            "--output-dir",
            "--repo",
            "--kube-apiserver",
            "--kube-token",
            "--kube-as-user",
            "--kube-as-group",
            "--set-file",
            "--username",
            "--password",
            "--ca-file",
            "--cert-file",
            "--key-file",
            "--registry-config",
            "--repository-config",
            "--plugins",
        }
    ),
    check=_helm,
    files=frozenset({"-f", "--values"}),
)

_CONTAINER = Tool(
    values=frozenset(
        {
            "--context",
            "-c",
            "--config",
            "-f",
            "--file",
            "--format",
            "--filter",
            "-n",
            "--last",
            "--tail",
            "--since",
            "--until",
            "-p",
            "--project-name",
            "--project-directory",
            "--env-file",
            "--profile",
            "--log-level",
            "--type",
            "--size",
        }
    ),
    reads=_paths(
        "ps",
        "images",
        "inspect",
        "logs",
        "stats",
        "top",
        "port",
        "version",
        "info",
        "history",
        "diff",
        "events",
        "compose ps",
        "compose ls",
        "compose config",
        "compose images",
        "compose logs",
        "compose top",
        "compose version",
        "compose port",
        "container ls",
        "container list",
        "container ps",
        "container inspect",
        "container logs",
        "container top",
        "container port",
        "container stats",
        "container diff",
        "image ls",
        "image list",
        "image inspect",
        "image history",
        "volume ls",
        "volume list",
        "volume inspect",
        "network ls",
        "network list",
        "network inspect",
        "system df",
        "system info",
        "system events",
        "context ls",
        "context list",
        "context show",
        "context inspect",
        "pod ps",
        "pod ls",
        "pod list",
        "pod inspect",
        "pod top",
        "pod logs",
        "pod stats",
        "machine list",
        "buildx ls",
        "buildx version",
    ),
    unsafe=frozenset(
        {
            "-H",
            "--host",
            "--url",
            "--remote",
            "-r",
            "--connection",
            "--identity",
            "--tlskey",
            "--tlscert",
            "--tlscacert",
        }
    ),
    files=frozenset({"-f", "--file", "--env-file"}),
)

# --------------------------------------------------------------------------- services, network

_SYSTEMD_TOOL = Tool(
    values=frozenset({"-p", "--property", "--value", "-H", "--host", "-M", "--machine"}),
    reads=_paths(
        "",
        "status",
        "show",
        "list-timezones",
        "timesync-status",
        "show-timesync",
        "list-keymaps",
        "list-locales",
        "list-x11-keymap-models",
        "list-sessions",
        "list-users",
        "list-seats",
        "show-session",
        "show-user",
        "session-status",
        "user-status",
        "hostname",
        "icon-name",
        "chassis",
        "deployment",
        "location",
    ),
    unsafe=frozenset({"-H", "--host", "-M", "--machine"}),
    check=lambda line: (
        not (
            line.words[:1]
            in (("hostname",), ("icon-name",), ("chassis",), ("deployment",), ("location",))
            and len(line.words) > 1
        )
    ),
)

_IP_OBJECTS = frozenset(
    {"address", "addr", "a", "link", "l", "route", "r", "ro", "neigh", "neighbour", "neighbor",
     "n", "rule", "ru", "maddress", "maddr", "m", "tunnel", "tun", "netns", "netconf", "ntable",
     "mroute", "tuntap", "token", "monitor", "xfrm", "mptcp", "nexthop", "stats", "vrf",
     "addrlabel", "l2tp", "fou", "macsec", "tcp_metrics", "sr", "srv6", "ioam"}
)  # fmt: skip
_IP_READ_VERBS = frozenset({"show", "sh", "list", "ls", "lst", "l", "get", "help"})


def _ip(line: Line) -> bool:
    words = line.words
    if not words or words[0] not in _IP_OBJECTS:
        return False
    if words[0] in ("monitor",):
        return True
    return len(words) == 1 or words[1] in _IP_READ_VERBS


_IP = Tool(
    values=frozenset({"-n", "-netns", "-f", "-family", "-rc", "-rcvbuf", "-l", "-loops"}),
    reads=_paths(*sorted(_IP_OBJECTS)),
    unsafe=frozenset({"-b", "-batch", "-force"}),
    check=_ip,
)

# --------------------------------------------------------------------------- packages

_SECRET_KEY = re.compile(r"(?i)auth|token|password|passwd|secret|_key|cert|credential")


def _npm(line: Line) -> bool:
    if line.words[:2] == ("config", "get"):
        return not any(_SECRET_KEY.search(w) for w in line.words[2:])
    if line.words[:1] in (("run",), ("run-script",)):
        return len(line.words) == 1
    if line.words[:1] == ("version",):
        return len(line.words) == 1
    if line.words[:1] == ("audit",):
        return len(line.words) == 1
    return not (line.has("--registry") and line.words[:1] not in _NPM_ASKS)


_NPM_ASKS = frozenset(
    {("view",), ("info",), ("show",), ("v",), ("outdated",), ("audit",), ("search",), ("s",),
     ("se",), ("find",), ("ping",), ("dist-tag",), ("owner",), ("access",)}
)  # fmt: skip

_NPM = Tool(
    values=frozenset({"-w", "--workspace", "--prefix", "--omit", "--include", "-C"}),
    reads=_paths(
        "ls",
        "list",
        "ll",
        "la",
        "explain",
        "why",
        "config get",
        "config list",
        "config ls",
        "root",
        "prefix",
        "bin",
        "pkg get",
        "query",
        "fund",
        "help",
        "version",
        "run",
        "run-script",
    ),
    unsafe=frozenset({"--userconfig", "--globalconfig", "--node-options"}),
    check=_npm,
    egress=_paths(
        "view",
        "info",
        "show",
        "v",
        "outdated",
        "audit",
        "search",
        "s",
        "se",
        "find",
        "ping",
        "dist-tag ls",
        "owner ls",
        "access list",
    ),
)


def _pip(line: Line) -> bool:
    if line.words[:1] == ("list",):
        return not (line.has("--outdated", "--uptodate") or line.short("o") or line.short("u"))
    return True


_PIP = Tool(
    values=frozenset(
        {
            "-i",
            "--index-url",
            "--extra-index-url",
            "--proxy",
            "--cert",
            "--client-cert",
            "--cache-dir",
            "--path",
            "--exclude",
            "--format",
            "--python",
            "-f",
            "--find-links",
        }
    ),
    reads=_paths(
        "list",
        "show",
        "freeze",
        "check",
        "inspect",
        "cache dir",
        "cache info",
        "cache list",
        "hash",
        "help",
    ),
    unsafe=frozenset({"--log", "--log-file", "--python", "--exists-action"}),
    check=_pip,
    egress=_paths("index", "search", "list"),
)

_APT_SIMULATED = frozenset(
    {"install", "remove", "purge", "upgrade", "dist-upgrade", "full-upgrade", "autoremove",
     "build-dep", "satisfy", "reinstall"}
)  # fmt: skip


def _apt(line: Line) -> bool:
    if line.words[:1] and line.words[0] in _APT_SIMULATED:
        return line.short("s") or line.has(
            "--simulate", "--just-print", "--dry-run", "--recon", "--no-act"
        )
    return True


_APT = Tool(
    values=frozenset({"-t", "--target-release", "-a", "--host-architecture"}),
    reads=_paths(
        "list",
        "show",
        "search",
        "policy",
        "depends",
        "rdepends",
        "showsrc",
        "madison",
        "showpkg",
        "stats",
        "pkgnames",
        "dump",
        "dumpavail",
        "unmet",
        "help",
        *sorted(_APT_SIMULATED),
    ),
    unsafe=frozenset({"-o", "--option", "-c", "--config-file"}),
    check=_apt,
)

_DPKG_READ = frozenset(
    {"-l", "--list", "-L", "--listfiles", "-s", "--status", "-S", "--search", "-p",
     "--print-avail", "-c", "--contents", "-I", "--info", "--get-selections",
     "--print-architecture", "--print-foreign-architectures", "--compare-versions", "-C",
     "--audit", "-V", "--verify", "-W", "--show", "-f", "--showformat"}
)  # fmt: skip


def _dpkg(line: Line) -> bool:
    return bool(line.options) and all(o in _DPKG_READ for o in line.options)


_DPKG = Tool(values=frozenset(), reads=_paths("*"), check=_dpkg)

_GO = Tool(
    values=frozenset(),
    reads=_paths("env", "version", "help", "doc"),
    unsafe=frozenset({"-w", "-u", "-json-w"}),
)


def _terraform(line: Line) -> bool:
    if line.words[:1] == ("fmt",):
        return line.has("-check", "--check") and not line.has("-write", "--write")
    return True


_TERRAFORM = Tool(
    values=frozenset(),
    reads=_paths(
        "validate",
        "fmt",
        "state list",
        "workspace list",
        "workspace show",
        "providers",
        "version",
        "graph",
    ),
    unsafe=frozenset({"-json-into", "-out", "-state-out", "-backup"}),
    check=_terraform,
)

_RPM_WRITES = frozenset(
    {"-i", "--install", "-U", "--upgrade", "-F", "--freshen", "-e", "--erase", "--import",
     "--rebuilddb", "--initdb", "--setperms", "--setugids", "--restore", "--reinstall",
     "--delsign", "--addsign", "--resign", "--define", "-D", "--eval", "--dbpath", "--root",
     "--macros", "--rcfile", "--pipe"}
)  # fmt: skip


def _rpm(line: Line) -> bool:
    first = next(iter(line.options), "")
    return (first.startswith(("-q", "-V")) or first in ("--query", "--verify")) and not line.has(
        *_RPM_WRITES
    )


_SIMPLE_LISTS: dict[str, Tool] = {
    "terraform": _TERRAFORM,
    "tofu": _TERRAFORM,
    "rpm": Tool(frozenset(), _paths("*"), check=_rpm),
    "launchctl": Tool(
        frozenset(), _paths("list", "print", "print-disabled", "blame", "version", "help")
    ),
    "brew": Tool(frozenset(), _paths("list", "ls", "leaves", "config", "deps", "services list")),
    "gem": Tool(frozenset(), _paths("list", "contents", "env"), frozenset({"--remote", "-r"})),
    "conda": Tool(
        frozenset({"-n", "--name", "-p", "--prefix"}), _paths("list", "env list", "info")
    ),
    "pipx": Tool(frozenset(), _paths("list")),
    "pnpm": Tool(frozenset({"--filter", "--depth"}), _paths("ls", "list", "why")),
    "uv": Tool(frozenset({"--python", "-p"}), _paths("pip list", "pip show", "pip freeze")),
    "poetry": Tool(frozenset(), _paths("env info", "env list", "version")),
}

TOOLS: dict[str, Tool] = {
    "kubectl": _KUBECTL,
    "helm": _HELM,
    "docker": _CONTAINER,
    "podman": _CONTAINER,
    "hostnamectl": _SYSTEMD_TOOL,
    "timedatectl": _SYSTEMD_TOOL,
    "localectl": _SYSTEMD_TOOL,
    "loginctl": _SYSTEMD_TOOL,
    "ip": _IP,
    "npm": _NPM,
    "pip": _PIP,
    "pip3": _PIP,
    "apt": _APT,
    "apt-get": _APT,
    "apt-cache": _APT,
    "dpkg": _DPKG,
    "dpkg-query": Tool(frozenset(), _paths("*")),
    "go": _GO,
    **_SIMPLE_LISTS,
}


def registry_egress(name: str, args: list[Word], st: ShellState) -> Finding:
    for a in args:
        text = a.text.split("=", 1)[1] if a.text.startswith("--") and "=" in a.text else a.text
        if "://" in text:
            st.add(*url_findings(text, st.trusted, f"`{name}`"))
    return finding(
        "packages.registry_query",
        f"`{shown([Word.of(name), *args])}` asks a package registry over the network "
        "(egress, medium).",
        RiskClass.EGRESS,
        Severity.MEDIUM,
        Category.NETWORK,
    )


def dry_run_kubectl(line: Line) -> bool:
    value = line.options.get("--dry-run")
    return value is not None and value in _KUBE_DRY_RUN and not line.has(*_KUBECTL.unsafe)


def _kill(v: list[str]) -> bool:
    return v[:1] in (["-l"], ["-L"], ["--list"], ["--table"]) and len(v) <= 2


def _crontab(v: list[str]) -> bool:
    return v in (["-l"], ["-l", "-u"]) or (len(v) == 3 and "-l" in v and "-u" in v)


def _sysctl(v: list[str]) -> bool:
    return not any(
        x.startswith(("-w", "--write", "-p", "--load", "--system", "-f")) or "=" in x for x in v
    )


def _mount(v: list[str]) -> bool:
    return all(x in ("-l", "--show-labels") for x in v) or (
        len(v) == 2 and v[0] in ("-t", "--types")
    )


def _ifconfig(v: list[str]) -> bool:
    return len([x for x in v if not x.startswith("-")]) <= 1 and not any(
        x in ("-d", "-u") for x in v
    )


def _route(v: list[str]) -> bool:
    return not any(
        x in ("add", "del", "delete", "change", "flush", "replace", "-f", "--flush") for x in v
    )


def _getent(v: list[str]) -> bool:
    return not any(x in ("shadow", "gshadow") for x in v)


def _arp(v: list[str]) -> bool:
    return not any(x.startswith(("-s", "-d", "-f", "--set", "--delete", "--file")) for x in v)


#: Commands that change the system in general but only list with these arguments
#: (`kill -l`, `crontab -l`, `sysctl -a`, `mount` alone, `ifconfig eth0`).
LISTINGS: dict[str, Callable[[list[str]], bool]] = {
    "kill": _kill,
    "crontab": _crontab,
    "sysctl": _sysctl,
    "mount": _mount,
    "ifconfig": _ifconfig,
    "route": _route,
    "arp": _arp,
    "getent": _getent,
}


#: Subcommands that fetch from the network (and then run or write): not reads, and network.
NETWORK_SUBCOMMANDS: dict[str, frozenset[tuple[str, ...]]] = {
    "pip": _paths("download", "wheel", "install"),
    "pip3": _paths("download", "wheel", "install"),
    "go": _paths("mod download", "get", "install", "mod tidy"),
    "openssl": _paths("s_client", "s_time", "ocsp"),
    "cargo": _paths("fetch", "install", "update"),
}

#: Commands that change system settings unless only listing or printing.
CHANGES_SYSTEM = frozenset({"hostname", "date", "ip", "hostnamectl", "timedatectl", "localectl"})


def network_subcommand(name: str, args: list[Word], st: ShellState) -> None:
    paths = NETWORK_SUBCOMMANDS.get(name)
    if paths is None:
        return
    words = tuple(a.text for a in args if not a.text.startswith("-"))
    if _matches(words, paths):
        st.add(
            finding(
                "packages.network_fetch",
                f"`{shown([Word.of(name), *args])}` fetches from the network (network, high).",
                RiskClass.EXEC,
                Severity.HIGH,
                Category.NETWORK,
            )
        )


def changes_system(name: str, args: list[Word]) -> Finding:
    return finding(
        "options.changes_system",
        f"`{shown([Word.of(name), *args])}` changes system settings (privileged, high).",
        RiskClass.EXEC,
        Severity.HIGH,
        Category.PRIVILEGED,
    )


def _files_read(name: str, args: list[Word], line: Line, tool: Tool, st: ShellState) -> None:
    for option in sorted(tool.files & set(line.options)):
        where = f"`{shown([Word.of(name), *args])}`"
        st.add(*check_path(line.options[option], st.cwd, st.rules, Access.READ, where))


def _asks(name: str, line: Line, tool: Tool) -> bool:
    """Whether an egress-listed subcommand asks the network this time (`pip list` only with
    --outdated/--uptodate, `npm audit` but not `npm audit fix`)."""
    if name in ("pip", "pip3") and line.words[:1] == ("list",):
        return tool.check is not None and not tool.check(line)
    return tool.check is None or tool.check(line)


def read_subcommand(name: str, args: list[Word], st: ShellState) -> Result | None:
    """A read (or egress) Result when `name args` is a read-only use of a listed tool."""
    network_subcommand(name, args, st)
    listing = LISTINGS.get(name)
    if listing is not None:
        if any(a.value is None for a in args) or not listing([a.text for a in args]):
            return None
        return ("read", frozenset(), [])
    tool = TOOLS.get(name)
    if tool is None:
        return None
    line = split(args, tool.values)
    if line is None or line.has(*tool.unsafe):
        return None
    if name == "kubectl" and dry_run_kubectl(line):
        _files_read(name, args, line, tool, st)
        return ("read", frozenset(), [])
    if tool.egress and _matches(line.words, tool.egress) and _asks(name, line, tool):
        st.add(registry_egress(name, args, st))
        return ("wrapped", frozenset({FETCH}), [])
    if not _matches(line.words, tool.reads):
        return None
    if tool.check is not None and not tool.check(line):
        return None
    _files_read(name, args, line, tool, st)
    return ("read", frozenset(), [])
