"""Rules about running programs and code."""

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
DOMAIN = "processes"

RULES = (
    rule(
        "shell.read_only",
        R,
        "low",
        "a command on the read-only list whose options and program text only read (help, "
        "version, dry runs, read-only subcommands, SQL reads included)",
        domain=DOMAIN,
    ),
    rule(
        "shell.read_template",
        R,
        "low",
        "a command matching an operator read template",
        domain=DOMAIN,
    ),
    rule(
        "shell.exec_template",
        X,
        "medium",
        "a command matching an operator exec template",
        domain=DOMAIN,
    ),
    rule(
        "shell.untemplated_exec",
        X,
        "high",
        "any other command",
        domain=DOMAIN,
    ),
    rule(
        "shell.local_program",
        X,
        "high",
        "running a program by path (`./x`), whose contents are not analysed",
        domain=DOMAIN,
    ),
    rule(
        "shell.dynamic_command",
        X,
        "high",
        "a command name computed at run time; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.dynamic_code",
        X,
        "high",
        "code only known at run time (`eval $x`, `bash -c` of a variable); fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.exec_fetched",
        X,
        "critical",
        "a command name from downloaded or decoded content (network when downloaded)",
        domain=DOMAIN,
    ),
    rule(
        "shell.download_execute",
        X,
        "critical",
        "running code that was just downloaded or decoded",
        N,
        domain=DOMAIN,
    ),
    rule(
        "shell.pipe_to_interpreter",
        X,
        "critical",
        "piping downloaded or decoded content into an interpreter (network when downloaded)",
        domain=DOMAIN,
    ),
    rule(
        "shell.inline_code",
        X,
        "high",
        "an interpreter running inline code (`python -c`, `node -e`, …)",
        domain=DOMAIN,
    ),
    rule(
        "shell.inline_code_delete",
        DE,
        "high",
        "inline code that deletes files",
        D,
        domain=DOMAIN,
    ),
    rule(
        "shell.kill",
        X,
        "high",
        "`kill`, `pkill`, `killall`",
        domain=DOMAIN,
    ),
    rule(
        "options.runs_program",
        X,
        "high",
        "an option that makes a reader run a program (`rg --pre`, `fd -x`, `man -P`, `sort "
        "--compress-program`, `tar --to-command`, `git grep -O`, `awk -f`, …)",
        domain=DOMAIN,
    ),
    rule(
        "options.destroys",
        DE,
        "high",
        "an option that makes a reader delete data (`journalctl --vacuum-*`, `dmesg -C`)",
        D,
        domain=DOMAIN,
    ),
    rule(
        "options.unknown",
        X,
        "high",
        "an option a strict grammar does not list",
        domain=DOMAIN,
    ),
    rule(
        "scripts.runs_command",
        X,
        "high",
        "awk `system()` or a `|` pipe, sed `e` or `s///e`",
        domain=DOMAIN,
    ),
    rule(
        "scripts.not_analysed",
        X,
        "high",
        "program text that is unseen (`-f FILE`), dynamic or does not parse",
        domain=DOMAIN,
    ),
    rule(
        "shell.piped_script",
        X,
        "high",
        "a shell or interpreter running the commands piped into it",
        domain=DOMAIN,
    ),
    rule(
        "shell.interpreter_on_data",
        X,
        "high",
        "`xargs`, `parallel`, `find -exec` running a shell or interpreter on input only known at "
        "run time; fails closed",
        domain=DOMAIN,
    ),
)
