"""Workspace tools a member enables in the team file: read, write, edit, list, and bash."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field
from teamctl.shared.agent.tool_names import WORKSPACE_TOOLS as WORKSPACE_TOOLS
from teamctl.shared.agent.tools import (
    ActionResult,
    Fallback,
    OptionalText,
    Text,
    ToolArgs,
    Toolbox,
    either_case,
)
from teamctl.shared.workspace.directory import EDIT_LIMIT_BYTES, Workspace


def _must_be_text(value: Any) -> Any:
    # Said plainly (pydantic's "valid string" reads oddly to a model): a null or a number would
    # otherwise become the text "None" or "42" in some callers' hands.
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


FileText = Annotated[str, BeforeValidator(_must_be_text)]
"""File content, taken exactly as sent (no trimming, '' allowed)."""
WorkspacePath = Annotated[
    Text,
    Field(
        validation_alias=either_case("path", "file", "filePath"),
        description="A path relative to the workspace root.",
    ),
]


class PathArgs(ToolArgs):
    """read_file: one file."""

    path: WorkspacePath


class WriteArgs(ToolArgs):
    """write_file: the whole content ('' when left out, as before)."""

    path: WorkspacePath
    content: Annotated[FileText, Fallback("")] = Field(
        validation_alias=AliasChoices("content", "text"), description="The full file content."
    )


class EditArgs(ToolArgs):
    """edit_file: one exact replacement; newText '' when left out (a deletion)."""

    path: WorkspacePath
    old_text: FileText = Field(
        validation_alias=either_case("oldText"),
        description="The exact text to replace; it must occur once.",
    )
    new_text: Annotated[FileText, Fallback("")] = Field(
        validation_alias=either_case("newText"), description="The replacement text."
    )


class ListArgs(ToolArgs):
    """list_files: a folder, the root by default."""

    path: OptionalText = Field(
        None,
        validation_alias=either_case("path", "file", "filePath"),
        description="A directory relative to the workspace root (default: the root).",
    )


class BashArgs(ToolArgs):
    """bash: one command line."""

    command: Text = Field(
        validation_alias=AliasChoices("command", "cmd"), description="The command line to run."
    )


class FileRead(ActionResult):
    """read_file: the text (a bounded prefix of a long file)."""

    path: str
    content: str


class FileWritten(ActionResult):
    """write_file and edit_file: the file's size afterwards."""

    path: str
    size_bytes: int = Field(alias="bytes")


class FilesListed(ActionResult):
    """list_files: entries under `path`, folders ending in '/'."""

    path: str
    entries: list[str]


class BashRan(ActionResult):
    """bash: the exit code and the (capped) output."""

    exit_code: int
    output: str


def add_workspace_tools(toolbox: Toolbox, workspace: Workspace, enabled: list[str]) -> None:
    """Add the enabled workspace tools, in the fixed order below; `bash` only when listed."""
    adders = {
        "read_file": _read_file,
        "write_file": _write_file,
        "edit_file": _edit_file,
        "list_files": _list_files,
        "bash": _bash,
    }
    for name, add in adders.items():
        if name in enabled:
            add(toolbox, workspace)


def _read_file(toolbox: Toolbox, workspace: Workspace) -> None:
    def read_file(args: PathArgs) -> FileRead:
        """read_file: a text file of the workspace (a bounded prefix)."""
        return FileRead(
            action="read_file", ok=True, path=args.path, content=workspace.read(args.path)
        )

    toolbox.add(
        "read_file",
        "Read a text file from the shared workspace (long files are "
        "truncated; hard-linked files are refused).",
        PathArgs,
        read_file,
        safe_to_repeat=True,  # it only reads
    )


def _write_file(toolbox: Toolbox, workspace: Workspace) -> None:
    def write_file(args: WriteArgs) -> FileWritten:
        """write_file: create or replace a file of the workspace."""
        written = workspace.write(args.path, args.content)
        return FileWritten(action="write_file", ok=True, path=args.path, size_bytes=written)

    toolbox.add(
        "write_file",
        "Create or overwrite a text file in the shared workspace (parent directories are created).",
        WriteArgs,
        write_file,
    )


def _edit_file(toolbox: Toolbox, workspace: Workspace) -> None:
    def edit_file(args: EditArgs) -> FileWritten:
        """edit_file: replace one exact occurrence of a text."""
        size = workspace.edit(args.path, args.old_text, args.new_text)
        return FileWritten(action="edit_file", ok=True, path=args.path, size_bytes=size)

    toolbox.add(
        "edit_file",
        "Replace one exact occurrence of oldText with newText in a "
        f"UTF-8 file of at most {EDIT_LIMIT_BYTES} bytes.",
        EditArgs,
        edit_file,
    )


def _list_files(toolbox: Toolbox, workspace: Workspace) -> None:
    def list_files(args: ListArgs) -> FilesListed:
        """list_files: the files under a workspace folder."""
        path = args.path or "."
        return FilesListed(action="list_files", ok=True, path=path, entries=workspace.list(path))

    toolbox.add(
        "list_files",
        "List files and directories in the shared workspace (recursive).",
        ListArgs,
        list_files,
        safe_to_repeat=True,  # it only reads
    )


def _bash(toolbox: Toolbox, workspace: Workspace) -> None:
    def bash(args: BashArgs) -> BashRan:
        """bash: a shell command in the workspace, bounded in time and output."""
        return BashRan.model_validate(
            {"action": "bash", "ok": True, **workspace.bash(args.command)}
        )

    toolbox.add(
        "bash",
        "Run a bash command with the workspace as working directory "
        "(limited in time, CPU, memory, file size and processes; long output is "
        "truncated).",
        BashArgs,
        bash,
    )
