"""Environment variables that make a "read-only" program run, load or write something.

`LESSOPEN='|./pre.sh %s' less f` runs `pre.sh`, `MANPAGER=… man ls` runs the pager,
`GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager …` and `HOME=./x git log` (another
`.gitconfig`) make git run a program, `TAR_OPTIONS='-I ./x'` hands tar an option that
executes, `RIPGREP_CONFIG_PATH` hands rg a `--pre`, `KUBECONFIG` a credential plugin,
`GCONV_PATH` makes iconv load a shared object. Setting one for a command fails closed like
`PATH=` (the shell analysis unions this set into its list of sensitive variables).

Pure data: imports nothing from the classifier.
"""

from __future__ import annotations

PROGRAM_VARIABLES = frozenset(
    {
        # pagers, editors, preprocessors and browsers
        "LESSOPEN", "LESSCLOSE", "LESSKEY", "LESSKEYIN", "LESSKEY_CONTENT", "LESSEDIT", "LESS",
        "MORE", "VISUAL", "FCEDIT", "MANPAGER", "MANOPT", "MANROFFOPT", "MANPATH", "BROWSER",
        "SYSTEMD_PAGER", "SYSTEMD_EDITOR", "SYSTEMD_PAGERSECURE", "BAT_PAGER", "BAT_CONFIG_PATH",
        "PSQL_PAGER", "PSQL_EDITOR", "PSQLRC", "MYSQL_HOME",
        # configuration that names programs
        "RIPGREP_CONFIG_PATH", "TAR_OPTIONS", "GIT_PAGER", "GIT_EDITOR", "GIT_CONFIG",
        "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT", "GIT_CONFIG_PARAMETERS",
        "GIT_EXEC_PATH", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND", "GIT_DIR",
        "GIT_TRACE", "GIT_TRACE2", "GIT_TRACE2_EVENT", "GIT_TRACE_PACKET", "GIT_TEMPLATE_DIR",
        "HOME", "XDG_CONFIG_HOME", "KUBECONFIG", "DOCKER_HOST", "DOCKER_CONFIG",
        "CONTAINER_HOST", "MAKEFLAGS", "MAKEFILES", "GNUMAKEFLAGS", "SHELL", "AWKPATH",
        "AWKLIBPATH", "GCONV_PATH", "LD_AUDIT", "HOSTALIASES", "PERL5OPT", "PERL5LIB",
        "RUBYOPT", "RUBYLIB", "NODE_PATH", "PYTHONHOME", "PYTHONUSERBASE", "INPUTRC",
        "PROMPT_COMMAND", "PS0", "HISTFILE", "HISTSIZE", "HISTFILESIZE", "HISTCONTROL",
        "HISTIGNORE",
    }
)  # fmt: skip
