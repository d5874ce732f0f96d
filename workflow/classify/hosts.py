"""Targets: URLs and host trust (DESIGN §4 layer 5, egress half).

A URL is parsed, not pattern-matched: the host is what a client would connect to, so
`https://trusted.com@evil.com` is egress to evil.com. IP literals in any spelling (dotted,
decimal, hex, octal, IPv6) are recognised; internationalised names are compared in their
IDNA form, computed as clients compute it (UTS #46, non-transitional). Unknown or
unparseable hosts count as untrusted.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from urllib.parse import urlsplit

import idna

from workflow.classify.findings import Finding, finding, note
from workflow.classify.taxonomy import Category, RiskClass, Severity

URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")
_NET_SCHEMES = frozenset(
    {
        "http",
        "https",
        "ftp",
        "ftps",
        "ws",
        "wss",
        "sftp",
        "ssh",
        "git",
        "rsync",
        "smb",
        "telnet",
        "ldap",
        "ldaps",
        "gopher",
        "dict",
        "tftp",
        "s3",
        "gs",
        "scp",
    }
)
_METADATA_HOSTS = frozenset(
    {"169.254.169.254", "fd00:ec2::254", "metadata.google.internal", "metadata", "100.100.100.200"}
)
_BLOB = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
NET = Category.NETWORK


_IP_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*", re.ASCII)


def _ip_part(text: str) -> int | None:
    """One dotted part as `inet_aton` reads it: hex, octal or decimal ASCII digits only (no
    sign, underscore or other digits, all of which Python's `int` accepts)."""
    if not _IP_PART.fullmatch(text):
        return None
    if text[:2] in ("0x", "0X"):
        return int(text, 16)
    return int(text, 8) if len(text) > 1 and text.startswith("0") else int(text, 10)


def parse_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address an IP literal denotes, in any spelling `inet_aton` accepts, else None."""
    h = host.strip("[]")
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    parts = h.split(".")
    if not 1 <= len(parts) <= 4 or not all(parts):
        return None
    nums = [_ip_part(p) for p in parts]
    if any(n is None for n in nums):
        return None
    values = [n for n in nums if n is not None]
    last_bits = 8 * (5 - len(values))
    if any(v > 255 for v in values[:-1]) or values[-1] >= 1 << last_bits:
        return None
    total = 0
    for v in values[:-1]:
        total = (total << 8) | v
    total = (total << last_bits) | values[-1]
    return ipaddress.IPv4Address(total)


def _idna(host: str) -> str | None:
    """The ASCII name a client connects to for `host`, or None when clients refuse it.

    Non-ASCII names go through UTS #46 non-transitional processing (IDNA 2008), as curl,
    httpx and browsers do: `faß.de` is `xn--fa-hia.de`, not `fass.de` (what Python's IDNA
    2003 codec says). ASCII names are only lower-cased: clients send them as they are.
    """
    if host.isascii():
        try:
            return host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            return None
    try:
        return idna.encode(host, uts46=True, transitional=False).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError):
        return None


def _trusted(host: str, trusted: tuple[str, ...]) -> bool:
    for entry in trusted:
        e = entry.lower().rstrip(".")
        if e.startswith("*."):
            if host.endswith(e[1:]):
                return True
        elif host == e:
            return True
    return False


@lru_cache(maxsize=4096)
def host_findings(host: str | None, trusted: tuple[str, ...], via: str) -> tuple[Finding, ...]:
    """Egress findings for connecting to `host` (None: the host cannot be known)."""
    if host is None or not host.strip():
        return (
            finding(
                "egress.unknown_host",
                f"{via} reaches a host that cannot be determined before it runs; unknown trust "
                "counts as untrusted (network, high).",
                RiskClass.EGRESS,
                Severity.HIGH,
                NET,
            ),
        )
    raw = host.strip().rstrip(".").lower()
    out: list[Finding] = []
    ip = parse_ip(raw)
    name = raw
    if ip is not None:
        name = str(ip)
        if name in _METADATA_HOSTS:
            out.append(
                finding(
                    "egress.cloud_metadata",
                    f"{via} reaches `{host}`, the cloud metadata service that hands out "
                    "instance credentials (secret_access, critical).",
                    RiskClass.EGRESS,
                    Severity.CRITICAL,
                    NET,
                    Category.SECRET_ACCESS,
                )
            )
        spelled = "" if name == raw.strip("[]") else f" (spelled `{host}`)"
        out.append(note("egress.ip_literal", f"{via} addresses the raw IP {name}{spelled}."))
    else:
        encoded = _idna(raw)
        if encoded is None:
            return (
                *out,
                finding(
                    "egress.bad_host",
                    f"{via} names the host `{host}`, which is not a valid host name; it counts "
                    "as untrusted (network, high).",
                    RiskClass.EGRESS,
                    Severity.HIGH,
                    NET,
                ),
            )
        if encoded != raw or "xn--" in encoded:
            out.append(
                note(
                    "egress.idn",
                    f"{via} uses the internationalised host `{host}` (`{encoded}`), which can "
                    "imitate another name.",
                )
            )
        name = encoded
        if name in _METADATA_HOSTS:
            return (*out, *host_findings("169.254.169.254", trusted, via))
    if _trusted(name, trusted):
        out.append(
            finding(
                "egress.trusted_host",
                f"{via} sends a request to the trusted host `{name}` (network, medium).",
                RiskClass.EGRESS,
                Severity.MEDIUM,
                NET,
            )
        )
    else:
        out.append(
            finding(
                "egress.untrusted_host",
                f"{via} sends a request to `{name}`, which is not a trusted host (network, high).",
                RiskClass.EGRESS,
                Severity.HIGH,
                NET,
            )
        )
    return tuple(out)


@lru_cache(maxsize=4096)
def url_findings(url: str, trusted: tuple[str, ...], via: str) -> tuple[Finding, ...]:
    """Egress findings for one URL: its real host, tricks in it, and data it carries."""
    shown = url if len(url) <= 120 else url[:117] + "..."
    if any(c.isspace() or ord(c) < 32 for c in url) or "\\" in url.split("?", 1)[0]:
        return (
            finding(
                "egress.bad_url",
                f"{via} uses the URL `{shown}`, which contains characters clients disagree on; "
                "its host counts as untrusted (network, high).",
                RiskClass.EGRESS,
                Severity.HIGH,
                NET,
            ),
        )
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError:
        host, parts = None, None
    if parts is None or (host is None and parts.scheme.lower() not in ("file", "")):
        return (
            finding(
                "egress.bad_url",
                f"{via} uses `{shown}`, which does not parse as a URL with a host; it counts as "
                "untrusted (network, high).",
                RiskClass.EGRESS,
                Severity.HIGH,
                NET,
            ),
        )
    if parts.scheme.lower() == "file":
        return ()
    out: list[Finding] = []
    if "@" in parts.netloc:
        out.append(
            finding(
                "egress.userinfo",
                f"The URL `{shown}` puts text before `@`, so it really goes to `{host}`, not "
                f"to `{parts.netloc.rpartition('@')[0]}` (network, high).",
                RiskClass.EGRESS,
                Severity.HIGH,
                NET,
            )
        )
    if parts.scheme.lower() not in _NET_SCHEMES:
        out.append(note("egress.scheme", f"The URL `{shown}` uses the scheme `{parts.scheme}`."))
    out.extend(host_findings(host, trusted, via))
    if parts.query or _BLOB.search(parts.path):
        where = "query string" if parts.query else "path"
        out.append(
            finding(
                "egress.data_in_url",
                f"The URL's {where} carries data to `{host}`: requesting it sends that data out "
                "(egress).",
                RiskClass.EGRESS,
                Severity.MEDIUM,
                NET,
            )
        )
    return tuple(out)


def remote_host(arg: str) -> str | None:
    """The host of an scp/rsync/ssh style `[user@]host:path` or `user@host` argument."""
    if URL_RE.match(arg):
        try:
            return urlsplit(arg).hostname
        except ValueError:
            return None
    head = arg.split("/", 1)[0]
    if ":" in head:
        host = head.split(":", 1)[0]
    elif "@" in head:
        host = head
    else:
        return None
    return host.rpartition("@")[2] or None
