"""Rules about privileges and system settings."""

from __future__ import annotations

from workflow.classify.rulebook.spec import rule
from workflow.classify.taxonomy import Category, RiskClass

R, EG, EXT, W, X, DE = (
    RiskClass.READ,
    RiskClass.EGRESS,
    RiskClass.EXTERNAL,
    RiskClass.WRITE_LOCAL,
    RiskClass.EXEC,
    RiskClass.DESTRUCTIVE,
)
D, P, N, S = Category.DESTRUCTIVE, Category.PRIVILEGED, Category.NETWORK, Category.SECRET_ACCESS
_ = (R, EG, EXT, W, X, DE, D, P, N, S)
DOMAIN = "privilege"

RULES = (
    rule(
        "shell.privileged_wrapper",
        X,
        "high or critical",
        "`sudo`, `doas`, `su`, `pkexec`, `run0`, `chroot`: run with another user's privileges; "
        "critical for a root shell",
        P,
        domain=DOMAIN,
    ),
    rule(
        "shell.permissions",
        X,
        "high or critical",
        "`chmod`/`chown`/`chgrp` opening up permissions or changing ownership; critical on "
        "system paths",
        P,
        domain=DOMAIN,
    ),
    rule(
        "shell.service_change",
        X,
        "high",
        "`systemctl`, `service`, `launchctl`, `rc-service` changing services",
        P,
        domain=DOMAIN,
    ),
    rule(
        "shell.system_settings",
        X,
        "high",
        "firewall, mounts, kernel modules, sysctl, accounts, cron, `at`, …",
        P,
        domain=DOMAIN,
    ),
    rule(
        "shell.power",
        X,
        "critical",
        "`reboot`, `shutdown`, `halt`, `poweroff`, `init`, `telinit`",
        P,
        domain=DOMAIN,
    ),
    rule(
        "options.changes_system",
        X,
        "high",
        "`hostname NAME`, `date -s`, `ip link set`, `ss -K`, `journalctl --rotate`, `hostnamectl "
        "set-*`",
        P,
        domain=DOMAIN,
    ),
    rule(
        "shell.sensitive_variable",
        X,
        "high",
        "setting a variable that changes what runs (`PATH`, `LD_PRELOAD`, `PAGER`, `LESSOPEN`, "
        "`GIT_CONFIG_COUNT`, `KUBECONFIG`, …); fails closed",
        domain=DOMAIN,
    ),
)
