"""Workspace tools a member enables in the team file: read, write, edit, list, and bash."""

from __future__ import annotations

from typing import Any

from teamctl.shared.agent.tools import Toolbox, first_string, string_property
from teamctl.shared.agent.workspace import EDIT_LIMIT_BYTES, Workspace
from teamctl.shared.errors import ToolFailed

PATH = string_property("A path relative to the workspace root.")


def add_workspace_tools(toolbox: Toolbox, workspace: Workspace, enabled: list[str]) -> None:
    """Add the enabled workspace tools, in the fixed order below; `bash` only when listed."""
    adders = {"read_file": _read_file, "write_file": _write_file, "edit_file": _edit_file,
              "list_files": _list_files, "bash": _bash}
    for name, add in adders.items():
        if name in enabled:
            add(toolbox, workspace)


def _path(arguments: dict[str, Any], required: bool = True) -> str:
    path = first_string(arguments, "path", "file", "filePath", "file_path")
    if path is None and required:
        raise ToolFailed("path is required")
    return path or "."


def _read_file(toolbox: Toolbox, workspace: Workspace) -> None:
    def read_file(arguments: dict[str, Any]) -> dict[str, Any]:
        """read_file: a text file of the workspace (a bounded prefix)."""
        path = _path(arguments)
        return {"action": "read_file", "ok": True, "path": path,
                "content": workspace.read(path)}

    toolbox.add("read_file", "Read a text file from the shared workspace (long files are "
                "truncated; hard-linked files are refused).",
                {"path": PATH}, ["path"], read_file)


def _write_file(toolbox: Toolbox, workspace: Workspace) -> None:
    def write_file(arguments: dict[str, Any]) -> dict[str, Any]:
        """write_file: create or replace a file of the workspace."""
        path = _path(arguments)
        content = arguments.get("content", arguments.get("text", ""))
        if not isinstance(content, str):
            # str(None) would write "None": the model must say what it means.
            raise ToolFailed("content must be a string (the full text of the file)")
        written = workspace.write(path, content)
        return {"action": "write_file", "ok": True, "path": path, "bytes": written}

    toolbox.add("write_file", "Create or overwrite a text file in the shared workspace "
                "(parent directories are created).",
                {"path": PATH, "content": string_property("The full file content.")},
                ["path", "content"], write_file)


def _edit_file(toolbox: Toolbox, workspace: Workspace) -> None:
    def edit_file(arguments: dict[str, Any]) -> dict[str, Any]:
        """edit_file: replace one exact occurrence of a text."""
        path = _path(arguments)
        old = arguments.get("oldText", arguments.get("old_text"))
        new = arguments.get("newText", arguments.get("new_text", ""))
        if not isinstance(old, str) or not isinstance(new, str):
            raise ToolFailed("oldText and newText must be strings")
        size = workspace.edit(path, old, new)
        return {"action": "edit_file", "ok": True, "path": path, "bytes": size}

    toolbox.add("edit_file", "Replace one exact occurrence of oldText with newText in a "
                f"UTF-8 file of at most {EDIT_LIMIT_BYTES} bytes.",
                {"path": PATH,
                 "oldText": string_property("The exact text to replace; it must occur once."),
                 "newText": string_property("The replacement text.")},
                ["path", "oldText", "newText"], edit_file)


def _list_files(toolbox: Toolbox, workspace: Workspace) -> None:
    def list_files(arguments: dict[str, Any]) -> dict[str, Any]:
        """list_files: the files under a workspace folder."""
        path = _path(arguments, required=False)
        return {"action": "list_files", "ok": True, "path": path,
                "entries": workspace.list(path)}

    toolbox.add("list_files", "List files and directories in the shared workspace (recursive).",
                {"path": string_property("A directory relative to the workspace root "
                                         "(default: the root).")},
                [], list_files)


def _bash(toolbox: Toolbox, workspace: Workspace) -> None:
    def bash(arguments: dict[str, Any]) -> dict[str, Any]:
        """bash: a shell command in the workspace, bounded in time and output."""
        command = first_string(arguments, "command", "cmd")
        if command is None:
            raise ToolFailed("command is required")
        return {"action": "bash", "ok": True, **workspace.bash(command)}

    toolbox.add("bash", "Run a bash command with the workspace as working directory "
                "(time-limited; long output is truncated).",
                {"command": string_property("The command line to run.")}, ["command"], bash)
