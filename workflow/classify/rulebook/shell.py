"""Rules about the command line itself."""

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
DOMAIN = "shell"

RULES = (
    rule(
        "shell.unparseable",
        X,
        "critical",
        "a command that does not parse; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.unsupported_shell",
        X,
        "high",
        "a shell other than bash/sh/zsh/dash; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.empty",
        X,
        "high",
        "an empty command; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.no_command",
        X,
        "high",
        "a shell tool called without a command; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.odd_character",
        X,
        "high",
        "a control or invisible character (C0 other than tab and newline, DEL, line/paragraph "
        "separators, zero-width, bidi); fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.function_definition",
        X,
        "high",
        "a function definition that replaces a later command; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.mapfile_callback",
        X,
        "high",
        "`mapfile -C CMD`: runs a command for every few lines it reads; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.compgen_command",
        X,
        "high",
        "`compgen -C CMD` / `-F FUNC`: runs a command or a function to list completions; "
        "fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.history_rerun",
        X,
        "high",
        "`fc` (other than `fc -l`): runs commands again from the shell's history; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.too_much_work",
        X,
        "high",
        "a command past the analysis bounds (steps, nesting, argv words, size); fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.alias",
        X,
        "high",
        "`alias x=…`: an alias that replaces a later command; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.trap",
        X,
        "high",
        "`trap CMD SIG`: a handler that runs code on a signal or exit; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.enable",
        X,
        "high",
        "`enable`: loads or disables shell builtins; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.hash_path",
        X,
        "high",
        "`hash -p`: makes a later command name run another file; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.command_default_path",
        X,
        "high",
        "`command -p`: looks the program up in a default PATH of its own; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.export_function",
        X,
        "high",
        "`export -f`: passes a function to child shells; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.nameref",
        X,
        "high",
        "`declare -n`: a name reference that assigns another variable; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.dynamic_variable",
        X,
        "high",
        "assigning a variable whose name is only known at run time (`printf -v`, `read`); fails "
        "closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.set_option",
        X,
        "high",
        "`set` options that change expansion or logging; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.shopt",
        X,
        "high",
        "`shopt` options that change expansion (dotglob, globstar, expand_aliases, …); fails "
        "closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.history_tampering",
        X,
        "high",
        "clearing or disabling the shell history (`history -c`, `HISTFILE`, `set +o history`); "
        "fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.prompt_expansion",
        X,
        "high",
        "`${x@P}` and other transformations that evaluate text; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.indirect_expansion",
        X,
        "high",
        "an indirect expansion (`${!x}`) fed to code; fails closed",
        domain=DOMAIN,
    ),
    rule(
        "shell.subscript_code",
        X,
        "high",
        "arithmetic on an array subscript that can run `$(…)`; fails closed",
        domain=DOMAIN,
    ),
)
