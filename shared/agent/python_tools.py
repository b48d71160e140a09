"""The team's own Python functions as member tools (`tools = ["mypkg.tools:search_docs"]`).

A `module:function` entry is imported where it runs: once by the coordinator to check
it (`TeamFile.check_python_tools`, before anything is written) and by the worker for each
attempt. The tool's name is the function's `__name__`, its description the docstring (whose
Google-style `Args:` section describes the parameters), and its arguments a pydantic model built
from the type-hinted signature with `create_model`, so the model's arguments are validated
before the call; a bad argument or an exception inside the function goes back to the model as
a TOOL_ERROR result (Toolbox.call). A parameter annotated `ToolContext` is filled in by the
runtime and left out of the schema. `async def` functions are awaited.
Results are JSON text, capped. A function marked `@tool(idempotent=True)` or
`@tool(read_only=True)` is safe to repeat: when a crash left a call of it in doubt (started,
no result recorded), the task's next attempt runs it again instead of telling the model.

Each call is bounded by `tool_timeout_s`. Python code cannot be stopped from outside its thread,
so a call runs in a daemon thread of its own and the session waits for it at most that long:
then the model gets a ToolTimeout error and the call is abandoned. What keeps an abandoned
thread harmless: its context's heartbeat answers False from the deadline on (it can never keep
the claim or turn lease alive, and a tool that checks it learns to stop), the same tool is
refused while it still runs (at most one stray thread per tool), an async tool is cancelled at
the deadline on its own event loop, and the thread ends with the job's work-horse, which exits
after a job that leaves such a thread (it is never kept for the run's next task; a turn with a
stray thread hands over to a fresh job instead of running another turn in the same process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import inspect
import json
import re
import threading
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ConfigDict, Field, PydanticSchemaGenerationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticSerializationError, to_jsonable_python
from teamctl.shared.agent.tool_names import check_entry, clash, is_python_tool
from teamctl.shared.agent.tools import TOOL_CALL_ID, ToolArgs, Toolbox, capped
from teamctl.shared.errors import ConfigError, ToolFailed, ToolTimeout
from teamctl.shared.process.user_code import import_user_module, where_imports_come_from

IDEMPOTENT_MARK = "__teamctl_idempotent__"
"""The attribute `@tool(idempotent=True)` sets on a function."""
READ_ONLY_MARK = "__teamctl_read_only__"
"""The attribute `@tool(read_only=True)` sets on a function."""
Fn = TypeVar("Fn", bound=Callable[..., Any])


def tool(*, idempotent: bool = False, read_only: bool = False) -> Callable[[Fn], Fn]:
    """Declare what a Python tool does when called twice: `idempotent` (a second call with the
    same arguments changes nothing more) or `read_only` (it changes nothing). Either makes a call
    a crash left in doubt safe to run again; the function itself is returned unchanged."""

    def mark(fn: Fn) -> Fn:
        setattr(fn, IDEMPOTENT_MARK, idempotent)
        setattr(fn, READ_ONLY_MARK, read_only)
        return fn

    return mark


def idempotency_key(scope: str, owner: str, call_id: str) -> str:
    """`scope:owner:call_id`: run, task and tool call id (team, member and tool call id for a
    teammate), the key that names one tool call across the attempts of its task."""
    return ":".join((scope, owner, call_id))


@dataclass(frozen=True)
class ToolContext:
    """What a Python tool may learn about the call it serves; declare a parameter of this type
    to get it (it is not part of the schema the model sees)."""

    member_id: str
    workspace: Path
    """The directory the workspace tools work in (the run's, or the persistent team's)."""
    heartbeat: Callable[[], bool]
    """Refresh the task's claim (a teammate's turn lease) now, during long work; False once it
    was taken away: stop and return."""
    run_id: str | None = None
    """The run (None for a persistent teammate)."""
    task_id: str | None = None
    """The task being executed (None for a persistent teammate)."""
    team_id: str | None = None

    @property
    def idempotency_key(self) -> str:
        """`run:task:tool_call_id` (`team:member:tool_call_id` for a teammate) of the call being
        served. The same when a crash makes its step run again from its recorded reply: a tool
        with effects outside teamctl can skip work it already did under this key."""
        return idempotency_key(
            self.run_id or self.team_id or "", self.task_id or self.member_id, TOOL_CALL_ID.get()
        )


class PythonToolArgs(ToolArgs):
    """A Python tool's arguments: validated as the signature says; an unknown argument is an
    error the model hears about, since no parameter would receive it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class PythonTool:
    """One imported function with its arguments model."""

    entry: str
    fn: Callable[..., Any]
    args: type[PythonToolArgs]
    params: dict[str, str]
    """Argument field -> parameter name, in signature order."""
    positional: tuple[str, ...]
    """Parameters that can only be passed by position."""
    context_param: str | None

    @property
    def name(self) -> str:
        return str(getattr(self.fn, "__name__", self.entry.partition(":")[2]))

    @property
    def idempotent(self) -> bool:
        """Marked `@tool(idempotent=True)`."""
        return getattr(self.fn, IDEMPOTENT_MARK, False) is True

    @property
    def read_only(self) -> bool:
        """Marked `@tool(read_only=True)`."""
        return getattr(self.fn, READ_ONLY_MARK, False) is True

    @property
    def safe_to_repeat(self) -> bool:
        """Whether a call a crash left in doubt may run again (idempotent or read-only)."""
        return self.idempotent or self.read_only

    @property
    def description(self) -> str:
        """The docstring up to its `Args:` section (those lines describe the parameters)."""
        summary, _ = split_docstring(inspect.getdoc(self.fn) or "")
        return summary or f"Calls {self.entry}."

    def call(
        self, args: PythonToolArgs, context: ToolContext, timeout_s: float | None = None
    ) -> Any:
        """Call the function with validated arguments (and the context); await a coroutine,
        cancelling it after `timeout_s` (ToolTimeout) when one is given."""
        values = {param: getattr(args, field) for field, param in self.params.items()}
        if self.context_param:
            values[self.context_param] = context
        positional = [values.pop(param) for param in self.positional]
        result = self.fn(*positional, **values)
        if not inspect.isawaitable(result):
            return result
        return _awaited(result if timeout_s is None else _within(result, timeout_s, self.name))


def load_tool(entry: str) -> PythonTool:
    """Import `module:function` and build its arguments model; ConfigError says what is wrong."""
    try:
        module_name, _, attr = check_entry(entry).partition(":")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        module = import_user_module(module_name)
    except Exception as exc:  # not installed, or its import raised
        raise ConfigError(
            f"tool {entry!r}: cannot import {module_name} ({exc}) from "
            f"{where_imports_come_from()}; install it, or start teamctl and the "
            "workers where it imports (their directory, PYTHONPATH)"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(
            f"tool {entry!r}: {module_name} has no function {attr}; check the name after the colon"
        )
    try:
        return _from_signature(entry, fn)
    except (TypeError, ValueError, NameError, PydanticSchemaGenerationError) as exc:
        raise ConfigError(
            f"tool {entry!r}: its signature cannot become a tool schema ({exc}); "
            "use type-hinted keyword parameters"
        ) from exc


ARGS_HEADINGS = ("Args:", "Arguments:", "Parameters:")
_ARG_LINE = re.compile(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")


def split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring as its text before `Args:` and each parameter's description
    (`name: text` or `name (type): text`, continued on more-indented lines)."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() in ARGS_HEADINGS), None)
    if start is None:
        return doc.strip(), {}
    described: dict[str, str] = {}
    current, indent = None, None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break  # the section ended (e.g. `Returns:`)
        found = _ARG_LINE.fullmatch(line.strip()) if depth == indent else None
        if found:
            current = found.group(1)
            described[current] = found.group(2).strip()
        elif current:
            described[current] = f"{described[current]} {line.strip()}".strip()
    return "\n".join(lines[:start]).strip(), described


def _from_signature(entry: str, fn: Callable[..., Any]) -> PythonTool:
    """The arguments model of `fn`, one field per parameter (aliased to the parameter's name,
    so names like `json` or `_x` do not clash with BaseModel's)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    _, described = split_docstring(inspect.getdoc(fn) or "")
    fields: dict[str, Any] = {}
    params: dict[str, str] = {}
    positional: list[str] = []
    context_param = None
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"*{param.name} and **{param.name} cannot be described to a model")
        hint = hints.get(param.name, Any)
        if _is_context(hint):
            context_param = param.name
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
            continue
        default = ... if param.default is param.empty else param.default
        field = f"arg_{index}"
        # A description in the annotation (Annotated[str, Field(description=...)]) wins; an
        # explicit None here would erase it.
        extra: dict[str, Any] = (
            {"description": described[param.name]}
            if param.name in described and not _has_description(hint)
            else {}
        )
        fields[field] = (hint, Field(default, alias=param.name, **extra))
        params[field] = param.name
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(param.name)
    args = create_model(
        f"{getattr(fn, '__name__', 'tool')}_args",
        __base__=PythonToolArgs,
        __doc__=f"The arguments of {entry}.",
        **fields,
    )
    args.model_json_schema()  # an argument type pydantic cannot describe fails here, not later
    return PythonTool(entry, fn, args, params, tuple(positional), context_param)


def _has_description(hint: Any) -> bool:
    """Whether an Annotated hint carries a Field with a description."""
    return typing.get_origin(hint) is typing.Annotated and any(
        isinstance(meta, FieldInfo) and meta.description for meta in hint.__metadata__
    )


def _is_context(hint: Any) -> bool:
    """Whether a parameter asks for the ToolContext (also as `ToolContext | None`)."""
    if hint is ToolContext:
        return True
    return ToolContext in typing.get_args(hint) and type(None) in typing.get_args(hint)


def _awaited(awaitable: Any) -> Any:
    """The awaitable's result: on a fresh event loop, or in a fresh thread when this thread
    already runs one (asyncio.run refuses to nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_wrapped(awaitable))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _wrapped(awaitable)).result()


async def _wrapped(awaitable: Any) -> Any:
    return await awaitable


async def _within(awaitable: Any, timeout_s: float, name: str) -> Any:
    """The awaitable's result, or ToolTimeout once `timeout_s` passed (the awaitable is
    cancelled, not awaited again: one that ignores cancellation is left to its thread)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done:
        task.cancel()
        raise _timed_out(name, timeout_s)
    return task.result()


def _timed_out(name: str, timeout_s: float) -> ToolTimeout:
    return ToolTimeout(
        f"{name} did not return within {timeout_s:g}s (the team's "
        "tool_timeout_s) and was abandoned; its result will not arrive. Go on "
        "without it, or call it with less work"
    )


def result_text(result: Any, max_chars: int) -> str:
    """A tool result as the model reads it: strings as they are, anything else as JSON (pydantic
    models as model_dump(mode="json")); over `max_chars`, cut and marked as truncated."""
    if isinstance(result, str):
        text = result
    else:
        try:
            text = json.dumps(to_jsonable_python(result), ensure_ascii=False)
        except PydanticSerializationError as exc:
            raise ToolFailed(
                f"the tool returned {type(result).__name__}, which is not JSON-serializable ({exc})"
            ) from exc
    return capped(text, max_chars)


def load_member_tools(entries: Iterable[str], taken: Iterable[str] = ()) -> list[PythonTool]:
    """Import a member's Python tools; ConfigError for one that will not load or whose name
    clashes with `taken` (tools already in the toolbox), a reserved name or another of them."""
    names = set(taken)
    tools = []
    for entry in entries:
        if not is_python_tool(entry):
            continue
        tool = load_tool(entry)
        reason = clash(tool.name, names)
        if reason:
            raise ConfigError(
                f"tool {entry!r} is named {tool.name!r}, but {reason}; rename the "
                "function (its __name__ is the tool's name)"
            )
        names.add(tool.name)
        tools.append(tool)
    return tools


def add_python_tools(
    toolbox: Toolbox,
    entries: Iterable[str],
    context: ToolContext,
    max_chars: int,
    *,
    timeout_s: float,
) -> None:
    """Import the Python tools among `entries` and add them to the toolbox after what it has,
    each call bounded by `timeout_s`; ConfigError (the attempt's error) when one will not load
    here or its name is taken."""
    for tool in load_member_tools(entries, toolbox.names):
        toolbox.add(
            tool.name,
            tool.description,
            tool.args,
            BoundedCall(tool, context, max_chars, timeout_s),
            max_chars=max_chars,
            safe_to_repeat=tool.safe_to_repeat,
        )


ABANDONED_PREFIX = "teamctl-abandoned-tool-"
"""The name a tool call's thread takes once the session stopped waiting for it."""


def abandoned_tool_calls() -> list[str]:
    """The tools whose abandoned calls still run in this process (their threads end with it)."""
    return [
        thread.name.removeprefix(ABANDONED_PREFIX)
        for thread in threading.enumerate()
        if thread.name.startswith(ABANDONED_PREFIX)
    ]


class BoundedCall:
    """One Python tool as the toolbox calls it: in a daemon thread, waited for at most
    `timeout_s`, then abandoned with a ToolTimeout error (see the module's docstring)."""

    def __init__(
        self, tool: PythonTool, context: ToolContext, max_chars: int, timeout_s: float
    ) -> None:
        self.tool = tool
        self.context = context
        self.max_chars = max_chars
        self.timeout_s = timeout_s
        self._abandoned: threading.Thread | None = None

    def __call__(self, args: PythonToolArgs) -> str:
        name = self.tool.name
        if self._abandoned is not None and self._abandoned.is_alive():
            # Another call would likely hang on what the first one holds, and add a thread.
            raise ToolTimeout(
                f"{name} timed out earlier and that call still runs; it cannot "
                "be called again in this session"
            )
        expired = threading.Event()
        future, thread = self._start(args, expired)
        done, _ = concurrent.futures.wait([future], timeout=self.timeout_s)
        if done and not isinstance(future.exception(), ToolTimeout):
            return future.result()
        expired.set()  # before anything else: the stray thread must not refresh the lease
        thread.name = ABANDONED_PREFIX + name
        self._abandoned = thread
        raise _timed_out(name, self.timeout_s)

    def _start(
        self, args: PythonToolArgs, expired: threading.Event
    ) -> tuple[concurrent.futures.Future[str], threading.Thread]:
        """Start the call in a daemon thread (with this thread's context variables), its
        heartbeat cut off once `expired` is set; its future and its thread."""
        context = dataclasses.replace(
            self.context, heartbeat=_until_set(expired, self.context.heartbeat)
        )
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._run, future, args, context),
            name=f"teamctl-tool-{self.tool.name}",
            daemon=True,
        )
        thread.start()
        return future, thread

    def _run(
        self, future: concurrent.futures.Future[str], args: PythonToolArgs, context: ToolContext
    ) -> None:
        try:
            future.set_result(
                result_text(self.tool.call(args, context, self.timeout_s), self.max_chars)
            )
        except BaseException as exc:  # SystemExit too: raised where the call was made
            future.set_exception(exc)


def _until_set(expired: threading.Event, heartbeat: Callable[[], bool]) -> Callable[[], bool]:
    """`heartbeat`, answering False without refreshing anything once `expired` is set."""

    def guarded() -> bool:
        return not expired.is_set() and heartbeat()

    return guarded
