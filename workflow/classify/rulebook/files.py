"""Rules about deleting and writing files."""

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
DOMAIN = "files"

RULES = (
    rule(
        "shell.rm",
        DE,
        "medium",
        "`rm` without `-r`: deletes the files it names",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.rm_recursive",
        DE,
        "high or critical",
        "`rm -r`: deletes trees; critical for `/`, system directories, home or a glob",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.unlink",
        DE,
        "medium",
        "`unlink`: deletes a file",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.truncation",
        DE,
        "high",
        "`shred`, `truncate`, `srm`: destroy file contents",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.dd",
        DE,
        "high or critical",
        "`dd of=…`: overwrites its output block by block; critical on a device",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.find_delete",
        DE,
        "high",
        "`find … -delete`: deletes every file it matches",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.disk_wipe",
        DE,
        "critical",
        "`dropdb`, `mkfs*`, `wipefs`, `fdisk`, `parted`, …: drop or wipe a whole database or disk",
        D,
        domain=DOMAIN,
    ),
    rule(
        "archives.tar_delete",
        DE,
        "high",
        "`tar --delete`: deletes members of an archive",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.write",
        W,
        "medium",
        "a command that writes the files it names (`tee`, `sort -o`, `tar -x`, …)",
        domain=DOMAIN,
    ),
    rule(
        "shell.redirect_write",
        W,
        "medium",
        "a redirection (`>`, `>>`, `&>`, `1<>`) that writes a file",
        domain=DOMAIN,
    ),
    rule(
        "options.writes_file",
        W,
        "medium",
        "an option or operand that makes a reader write (`sort -o`, `tree -o`, `iconv -o`, `less "
        "-o`, `find -fprint`, `uniq IN OUT`, `sed -i`)",
        domain=DOMAIN,
    ),
    rule(
        "scripts.writes_file",
        W,
        "medium",
        "awk `print > file`, sed `w`/`W`/`s///w`, `gawk -i inplace`",
        domain=DOMAIN,
    ),
    rule(
        "scripts.write_unknown_file",
        W,
        "high",
        "awk writing to a file named at run time",
        domain=DOMAIN,
    ),
    rule(
        "target.protected_write",
        W,
        "critical",
        "writing or running a protected-write path (`.git/hooks`, shell rc files, `/etc`, "
        "`authorized_keys`, cron, …)",
        P,
        domain=DOMAIN,
    ),
    rule(
        "target.human_confirm",
        W,
        "high",
        "changing a settings or build file a human should confirm (`*settings*.json`, "
        "`pyproject.toml`, CI workflows, …)",
        domain=DOMAIN,
    ),
)
