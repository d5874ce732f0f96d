"""The tools of the coding agents people run, by the names their hooks report.

Claude Code, Codex, Gemini CLI and Cursor each name their built-in tools their own way; a hook
(`headgate hook <client>`) proposes the call under that name with the client's own arguments
(`file_path`, `pattern`, `url`, `command`, ...). Listed here, a plain read of a coding agent is
a read and a shell call goes through the shell analysis, instead of every call being an
unknown tool that waits for a human.

Paths, URLs and hosts in the arguments are still checked by the target rules (a `Read` of
`~/.ssh/id_rsa` is critical), and the generic names of the built-in table win over these where
both spell a tool the same way (`glob`, `read_file`, `write_file`, `web_fetch`).

Each entry: (risk class, severity, categories, takes_command).
"""

from __future__ import annotations

from workflow.classify.taxonomy import Category, RiskClass, Severity

AgentTool = tuple[RiskClass, Severity, tuple[Category, ...], bool]

_R, _EG, _W, _X = RiskClass.READ, RiskClass.EGRESS, RiskClass.WRITE_LOCAL, RiskClass.EXEC
_LOW, _MED, _HIGH = Severity.LOW, Severity.MEDIUM, Severity.HIGH
_NET = (Category.NETWORK,)

_READ: AgentTool = (_R, _LOW, (), False)
_WRITE: AgentTool = (_W, _MED, (), False)
_SHELL: AgentTool = (_X, _HIGH, (), True)
_FETCH: AgentTool = (_EG, _MED, _NET, False)

#: Claude Code's tools (`tool_name` of its PreToolUse/PostToolUse hooks).
CLAUDE_CODE: dict[str, AgentTool] = {
    "Bash": _SHELL,  # {command, description, timeout, run_in_background}
    "BashOutput": _READ,  # reads the output of a background shell the agent started
    "Read": _READ,  # {file_path, offset, limit}
    "Grep": _READ,  # {pattern, path, glob, ...}
    "Glob": _READ,  # {pattern, path}
    "LS": _READ,  # {path, ignore}
    "Write": _WRITE,  # {file_path, content}
    "Edit": _WRITE,  # {file_path, old_string, new_string}
    "MultiEdit": _WRITE,  # {file_path, edits}
    "NotebookEdit": _WRITE,  # {notebook_path, new_source, ...}
    "NotebookRead": _READ,  # {notebook_path}
    "WebFetch": _FETCH,  # {url, prompt}
    "WebSearch": _FETCH,  # {query, allowed_domains, blocked_domains}
    # A sub-agent: its own tool calls pass through the same hooks one by one.
    "Task": _READ,
    # Claude Code's own to-do list and plan mode: nothing outside the session changes.
    "TodoWrite": _READ,
    "ExitPlanMode": _READ,
}

#: Codex's tools. Its hooks report the shell (`exec_command`) as `Bash`, like Claude Code.
CODEX: dict[str, AgentTool] = {
    "shell": _SHELL,  # {command: [argv...], workdir}
    "shell_command": _SHELL,  # {command, workdir}
    "exec_command": _SHELL,  # {cmd, workdir}
    "local_shell": _SHELL,
    "apply_patch": _WRITE,  # {input: the patch}
    "update_plan": _READ,
    "view_image": _READ,  # {path}
}

#: Gemini CLI's tools (`tool_name` of its BeforeTool/AfterTool hooks).
GEMINI: dict[str, AgentTool] = {
    "run_shell_command": _SHELL,  # {command, description, directory}
    "read_file": _READ,  # {file_path | absolute_path, offset, limit}
    "read_many_files": _READ,  # {paths, include, exclude}
    "list_directory": _READ,  # {dir_path | path}
    "glob": _READ,  # {pattern, path}
    "search_file_content": _READ,  # {pattern, path, include}
    "write_file": _WRITE,  # {file_path, content}
    "replace": _WRITE,  # {file_path, old_string, new_string}
    "save_memory": _WRITE,  # {fact}: appended to ~/.gemini/GEMINI.md
    "write_todos": _READ,
    "web_fetch": _FETCH,  # {prompt}: the URLs are inside the prompt
    "google_web_search": _FETCH,  # {query}
}

#: Cursor: its dedicated hook events are proposed under the `cursor_*` names by
#: `headgate hook cursor`; its generic preToolUse event names the tool (`Shell`, `Read`, ...).
CURSOR: dict[str, AgentTool] = {
    "cursor_shell": _SHELL,  # beforeShellExecution {command, cwd}
    "cursor_read_file": _READ,  # beforeReadFile {file_path}
    "Shell": _SHELL,  # preToolUse {command}
    "StrReplace": _WRITE,  # preToolUse {file_path, old_string, new_string}
}

AGENT_TOOLS: dict[str, AgentTool] = {**CLAUDE_CODE, **CODEX, **GEMINI, **CURSOR}
