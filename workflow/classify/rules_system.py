"""Danger rules, continued: network transfer, git, privileges, packages, secrets, cloud CLIs."""

from __future__ import annotations

from workflow.classify.findings import finding
from workflow.classify.hosts import URL_RE, host_findings, remote_host, url_findings
from workflow.classify.readonly import git_is_read, git_remote_contacted
from workflow.classify.rules import (
    CRIT,
    DE,
    EG,
    EXEC,
    HIGH,
    MED,
    NONE,
    SYSTEM_DIRS,
    D,
    N,
    P,
    Result,
    Rule,
    S,
    X,
    _has_flag,
    _positional,
    _simple,
    _vals,
)
from workflow.classify.shellstate import DECODE, FETCH, ShellState, Word, shown
from workflow.classify.targets import normalise


def _urls(name: str, args: list[Word], st: ShellState) -> None:
    for a in args:
        text = a.text.split("=", 1)[1] if a.text.startswith("--") and "=" in a.text else a.text
        if URL_RE.match(text):
            if a.value is None and DYNAMIC_IN(text):
                host = text.split("://", 1)[1].split("/", 1)[0]
                if "__dynamic__" in host:
                    st.add(*host_findings(None, st.trusted, f"`{name}`"))
                    continue
            st.add(*url_findings(text, st.trusted, f"`{name}`"))


def DYNAMIC_IN(text: str) -> bool:
    return "__dynamic__" in text


def _network(rule: str, text: str) -> Rule:
    def apply(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
        st.add(
            finding(rule, f"`{shown([Word.of(name), *args])}` {text} (network, high).", X, HIGH, N)
        )
        _urls(name, args, st)
        return EXEC

    return apply


_UPLOAD = (
    "-d",
    "--data",
    "--data-binary",
    "--data-raw",
    "--data-urlencode",
    "-F",
    "--form",
    "-T",
    "--upload-file",
    "--post-data",
    "--post-file",
    "--body-data",
    "--body-file",
)


def _fetcher(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    st.add(
        finding(
            "shell.network_fetch",
            f"`{shown([Word.of(name), *args])}` transfers data over the network (network, high).",
            X,
            HIGH,
            N,
        )
    )
    _urls(name, args, st)
    if not any(URL_RE.match(a.text) for a in args) and _positional(args):
        st.add(*host_findings(None, st.trusted, f"`{name}`"))
    vals = _vals(args)
    if any(
        v in _UPLOAD or v.startswith(tuple(u + "=" for u in _UPLOAD if u[1] == "-")) for v in vals
    ):
        st.add(
            finding(
                "shell.upload",
                f"`{name}` sends local data in the request body (egress of that data, high).",
                EG,
                HIGH,
                N,
            )
        )
    paths: list[Word] = []
    for i, v in enumerate(vals):
        if v in ("-o", "--output", "-O", "--output-document") and i + 1 < len(vals):
            out = vals[i + 1]
            if out != "-":
                paths.append(args[i + 1])
                st.downloaded.add(normalise(out, st.cwd, st.rules.home))
        elif (v.startswith("-") and v[1:2] == "@") or v.startswith("@"):
            paths.append(Word.of(v.lstrip("-").lstrip("@")))
        elif v.startswith(("-d@", "--data=@", "-F")) and "@" in v:
            paths.append(Word.of(v.split("@", 1)[1]))
    for i, v in enumerate(vals):
        if v in _UPLOAD and i + 1 < len(vals) and "@" in vals[i + 1]:
            paths.append(Word.of(vals[i + 1].split("@", 1)[1].split(";")[0]))
    return ("exec", frozenset({FETCH}), paths)


def _netcat(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    if _has_flag(args, "-e", "-c", "--exec", "--sh-exec", "--lua-exec"):
        st.add(
            finding(
                "shell.netcat_exec",
                f"`{name}` with `-e`/`-c` serves a shell over the "
                "network (a reverse or bind shell) (network, critical).",
                X,
                CRIT,
                N,
            )
        )
    st.add(
        finding(
            "shell.netcat",
            f"`{name} {shown(args)}` opens a raw network connection (network, high).",
            X,
            HIGH,
            N,
        )
    )
    hosts = [a for a in _positional(args) if not a.text.isdigit()]
    st.add(*host_findings(hosts[0].value if hosts else None, st.trusted, f"`{name}`"))
    return ("exec", frozenset({FETCH}), [])


def _remote(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    st.add(
        finding(
            "shell.remote",
            f"`{name} {shown(args)}` connects to another machine (network, high).",
            X,
            HIGH,
            N,
        )
    )
    opts = {"-i", "-p", "-P", "-o", "-l", "-F", "-J", "-L", "-R", "-D", "-e", "-c", "-W"}
    pos: list[Word] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a.text in opts:
            skip = True
        elif not a.text.startswith("-"):
            pos.append(a)
    hosts = [h for h in (remote_host(a.text) for a in pos) if h]
    if name == "ssh" and pos:
        hosts = hosts or [pos[0].text]
        if len(pos) > 1 and all(p.value is not None for p in pos[1:]):
            st.nested(" ".join(p.text for p in pos[1:]), "The remote `ssh` command", st)
    if name == "rsync" and _has_flag(
        args, "--delete", "--delete-after", "--delete-before", "--remove-source-files"
    ):
        st.add(
            finding(
                "shell.rsync_delete",
                "`rsync --delete` removes files at the destination (destructive, high).",
                DE,
                HIGH,
                D,
            )
        )
    for h in hosts:
        st.add(*host_findings(h, st.trusted, f"`{name}`"))
    local = [a for a in pos if remote_host(a.text) is None]
    return ("exec", frozenset({FETCH}), local if name != "ssh" else [])


# --------------------------------------------------------------------------- git

_GIT_NET = frozenset(
    {"push", "fetch", "pull", "clone", "ls-remote", "send-email", "request-pull", "archive"}
)
_GIT_GLOBAL_VALUE = frozenset(
    {"-C", "--git-dir", "--work-tree", "--namespace", "-c", "--exec-path", "--config-env"}
)


def _git_destructive(sub: str, rest: list[Word]) -> str | None:
    vals = _vals(rest)
    pos = [v for v in vals if not v.startswith("-")]
    if sub == "push" and (
        _has_flag(
            rest, "--force", "--force-with-lease", "--mirror", "--delete", "--prune", short="fd"
        )
        or any(v.startswith(("+", ":")) for v in pos[1:])
    ):
        return "force-pushes or deletes remote history"
    if sub == "reset" and _has_flag(rest, "--hard", "--merge", "--keep"):
        return "discards commits and uncommitted changes"
    if (
        sub == "clean"
        and _has_flag(rest, "--force", short="f")
        and not _has_flag(rest, "--dry-run", short="n")
    ):
        return "deletes untracked files"
    if sub == "checkout" and ("--" in vals or "." in pos or _has_flag(rest, "--force", "-f")):
        return "discards uncommitted changes"
    if sub == "restore" and not _has_flag(rest, "--staged", short="S"):
        return "discards uncommitted changes"
    if (sub == "stash" and pos[:1] in (["drop"], ["clear"])) or (
        sub == "branch" and _has_flag(rest, "-D", "--delete")
    ):
        return "deletes stashed work or branches"
    if sub in ("filter-branch", "filter-repo") or (
        sub == "reflog" and pos[:1] in (["expire"], ["delete"])
    ):
        return "rewrites or expires history"
    if sub == "gc" and any(v.startswith("--prune") for v in vals):
        return "prunes unreachable commits"
    return None


def _git(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    i, paths = 0, []
    while i < len(args) and args[i].text.startswith("-"):
        flag = args[i].text
        if flag in ("-c", "--config-env", "--exec-path") or flag.startswith("--exec-path="):
            st.add(
                finding(
                    "shell.git_config_injection",
                    f"`git {flag}` sets configuration for "
                    "this run, which can make git run arbitrary programs (exec, high).",
                    X,
                    HIGH,
                    fail_closed=True,
                )
            )
        if flag in _GIT_GLOBAL_VALUE and i + 1 < len(args):
            if flag in ("-C", "--git-dir", "--work-tree"):
                paths.append(args[i + 1])
            i += 1
        i += 1
    if i >= len(args):
        return ("read", frozenset(), paths)
    sub, rest = args[i].text, args[i + 1 :]
    harm = _git_destructive(sub, rest)
    if harm:
        cats = (D, N) if sub == "push" else (D,)
        st.add(
            finding(
                "shell.git_destructive",
                f"`git {sub} {shown(rest)}` {harm} (destructive, high).",
                DE,
                HIGH,
                *cats,
            )
        )
    if (
        sub in _GIT_NET
        or (sub in ("submodule", "remote") and rest[:1] and rest[0].text in ("update", "add"))
        or git_remote_contacted(sub, rest)
    ):
        st.add(
            finding(
                "shell.git_network",
                f"`git {sub}` talks to a remote repository (network, high).",
                X,
                HIGH,
                N,
            )
        )
        _urls("git", rest, st)
        return ("exec", frozenset({FETCH}), paths)
    if git_is_read(sub, rest):
        files = [w for w in rest if w.text.startswith(("/", "~"))] + [
            Word.of(w.text.split("=", 1)[1]) for w in rest if w.text.startswith("--contents=")
        ]  # `git blame --contents=FILE` prints FILE
        return ("read", frozenset(), paths + files)
    return ("exec", frozenset(), paths)


# --------------------------------------------------------------------------- privileges


def _chmod(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    vals = _vals(args)
    mode = next((v for v in vals if not v.startswith("-") or v[1:2] in "rwxXst"), "")
    targets = [normalise(a.approx, st.cwd, st.rules.home) for a in _positional(args)[1:]]
    recursive = _has_flag(args, "--recursive", short="R")
    system = any(
        t in SYSTEM_DIRS
        or t.startswith(("/etc/", "/usr/", "/bin/", "/sbin/"))
        or t == st.rules.home
        for t in targets
    )
    wide = mode.endswith("777") or "a+w" in mode or "o+w" in mode or "a+rwx" in mode
    setid = "+s" in mode or (mode.isdigit() and len(mode) == 4 and mode[0] in "2467")
    if (recursive and system) or (wide and system):
        sev = CRIT
    elif wide or setid or name in ("chown", "chgrp"):
        sev = HIGH
    else:
        return EXEC
    st.add(
        finding(
            "shell.permissions",
            f"`{name} {shown(args)}` changes ownership or opens up "
            f"permissions (privileged, {sev}).",
            X,
            sev,
            P,
        )
    )
    return EXEC


_SERVICE_READ = frozenset(
    {
        "status",
        "is-active",
        "is-enabled",
        "list-units",
        "show",
        "cat",
        "list-unit-files",
        "list-timers",
        "is-failed",
    }
)


def _service(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    pos = [a.text for a in _positional(args)]
    remote = _has_flag(args, "-H", "--host", "-M", "--machine")  # over ssh, in a container
    if name == "systemctl" and pos and pos[0] in _SERVICE_READ and not remote:
        return ("read", frozenset(), [])
    st.add(
        finding(
            "shell.service_change",
            f"`{name} {shown(args)}` changes system services (privileged, high).",
            X,
            HIGH,
            P,
        )
    )
    return EXEC


_PKG_CHANGE = frozenset(
    {
        "install",
        "add",
        "remove",
        "uninstall",
        "purge",
        "upgrade",
        "update",
        "i",
        "ci",
        "erase",
        "reinstall",
        "dist-upgrade",
        "autoremove",
        "publish",
        "get",
    }
)
_SYSTEM_PKG = frozenset(
    {
        "apt",
        "apt-get",
        "aptitude",
        "yum",
        "dnf",
        "pacman",
        "zypper",
        "apk",
        "port",
        "snap",
        "flatpak",
        "rpm",
        "dpkg",
        "emerge",
    }
)
#: Package managers that install for a user or a project, not the system.
_USER_PKG = frozenset(
    {
        "brew",
        "pip",
        "pip3",
        "pipx",
        "npm",
        "yarn",
        "pnpm",
        "gem",
        "cargo",
        "go",
        "uv",
        "poetry",
        "conda",
        "mamba",
        "bundle",
        "composer",
    }
)


def _package(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    pos = [a.text for a in _positional(args)]
    sync = name == "pacman" and any(v.startswith(("-S", "-R", "-U")) for v in _vals(args))
    if (
        not sync
        and not (pos and pos[0] in _PKG_CHANGE)
        and not (name in ("rpm", "dpkg") and _has_flag(args, short="iUe"))
    ):
        return EXEC
    st.add(
        finding(
            "shell.package_install",
            f"`{name} {shown(args)}` installs or removes "
            "packages from the network (network, high).",
            X,
            HIGH,
            N,
        )
    )
    system = name in _SYSTEM_PKG or _has_flag(
        args, "-g", "--global", "--break-system-packages", "--system", "--target", "--root"
    )
    if system:
        st.add(
            finding(
                "shell.package_system",
                f"`{name}` changes system-wide packages (privileged, high).",
                X,
                HIGH,
                P,
            )
        )
    return ("exec", frozenset({FETCH}), [])


# --------------------------------------------------------------------------- secrets


def _secret(rule: str, text: str) -> Rule:
    def apply(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
        st.add(
            finding(
                rule,
                f"`{shown([Word.of(name), *args])}` {text} (secret_access, critical).",
                EG,
                CRIT,
                S,
            )
        )
        return ("wrapped", frozenset(), [])

    return apply


def _security(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    pos = [a.text for a in _positional(args)]
    if pos and (pos[0].startswith(("find-", "dump-", "export")) or pos[0] == "unlock-keychain"):
        return _secret("shell.keychain", "reads the keychain")(name, args, st, stdin_text)
    return EXEC


def _env_like(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    from workflow.classify.rules import env_dump

    if name in ("set", "export", "declare", "typeset") and (
        args and not all(a.text in ("-p", "-x", "-px") for a in args)
    ):
        return ("read", frozenset(), [])
    st.add(env_dump(shown([Word.of(name), *args])))
    return ("wrapped", frozenset(), [])


def _history(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    st.add(
        finding(
            "shell.history",
            "`history` prints past commands, which often contain "
            "typed passwords and tokens (secret_access, high).",
            EG,
            HIGH,
            S,
        )
    )
    return ("wrapped", frozenset(), [])


def _decoder(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    decoding = _has_flag(args, "--decode", short="dDr") or name in ("uudecode",)
    return (None, frozenset({DECODE}) if decoding else frozenset(), None)


def _cloud(name: str, args: list[Word], st: ShellState, stdin_text: str | None) -> Result:
    pos = [a.text for a in _positional(args)]
    line = " ".join(pos)
    st.add(
        finding(
            "shell.cloud_cli",
            f"`{name} {shown(args)}` acts on a cloud or remote service (network, high).",
            X,
            HIGH,
            N,
        )
    )
    if any(k in line for k in ("delete", "destroy", " rm", "remove", "terminate", "prune")):
        st.add(
            finding(
                "shell.cloud_delete",
                f"`{name} {line}` deletes remote resources (destructive, high).",
                DE,
                HIGH,
                D,
                N,
            )
        )
    if any(
        k in line
        for k in (
            "get secret",
            "configure get",
            "print-access-token",
            "auth token",
            "get-secret-value",
            "get-session-token",
            "secrets versions access",
            "keyvault secret show",
        )
    ):
        st.add(
            finding(
                "shell.cloud_secret",
                f"`{name} {line}` reads credentials (secret_access, critical).",
                EG,
                CRIT,
                S,
                N,
            )
        )
    return ("exec", frozenset({FETCH}), [])


SYSTEM_RULES: dict[str, Rule] = {
    **{
        n: _fetcher
        for n in (
            "curl",
            "wget",
            "fetch",
            "aria2c",
            "http",
            "https",
            "xh",
            "curlie",
            "lynx",
            "links",
            "w3m",
        )
    },
    **{n: _netcat for n in ("nc", "ncat", "netcat", "socat", "telnet")},
    **{n: _remote for n in ("ssh", "scp", "sftp", "rsync", "mosh")},
    **{
        n: _network("shell.network", "makes network connections")
        for n in ("ftp", "ping", "dig", "nslookup", "host", "traceroute", "nmap", "whois")
    },
    "git": _git,
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    **{n: _service for n in ("systemctl", "service", "launchctl", "rc-service")},
    **{
        n: _simple(
            "shell.system_settings",
            "changes firewall, mounts, kernel or account settings",
            X,
            HIGH,
            P,
        )
        for n in (
            "iptables",
            "ip6tables",
            "ufw",
            "nft",
            "firewall-cmd",
            "pfctl",
            "mount",
            "umount",
            "modprobe",
            "insmod",
            "rmmod",
            "sysctl",
            "useradd",
            "usermod",
            "userdel",
            "groupadd",
            "groupdel",
            "passwd",
            "chpasswd",
            "visudo",
            "setcap",
            "chattr",
            "crontab",
            "at",
            "update-alternatives",
            "ldconfig",
            "dscl",
        )
    },
    **{
        n: _simple("shell.power", "stops or restarts the machine", X, CRIT, P)
        for n in ("reboot", "shutdown", "halt", "poweroff", "init", "telinit")
    },
    **{n: _package for n in sorted(_SYSTEM_PKG | _USER_PKG)},
    "security": _security,
    **{n: _env_like for n in ("printenv", "set", "export", "declare", "typeset", "compgen")},
    "history": _history,
    **{
        n: _secret("shell.secret_store", "reads a password or secret store")
        for n in (
            "secret-tool",
            "pass",
            "op",
            "vault",
            "keyctl",
            "lpass",
            "bw",
            "gopass",
            "kwallet-query",
        )
    },
    **{n: _decoder for n in ("base64", "base32", "xxd", "uudecode", "basenc")},
    **{
        n: _cloud
        for n in (
            "aws",
            "gcloud",
            "gsutil",
            "az",
            "kubectl",
            "helm",
            "terraform",
            "tofu",
            "pulumi",
            "gh",
            "glab",
            "docker",
            "podman",
            "heroku",
            "flyctl",
            "vercel",
            "doctl",
        )
    },
    **{
        n: _simple("shell.disk_wipe", "drops or wipes a whole database or disk", DE, CRIT, D)
        for n in (
            "dropdb",
            "dropuser",
            "mkfs",
            "wipefs",
            "blkdiscard",
            "fdisk",
            "sfdisk",
            "parted",
            "sgdisk",
            "gdisk",
            "diskutil",
            "mke2fs",
            "mkswap",
            "format",
        )
    },
    **{n: _simple("shell.kill", "kills processes", X, HIGH) for n in ("kill", "pkill", "killall")},
}
_ = (MED, NONE)
