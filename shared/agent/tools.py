"""The tools a member may call; a tool's failure becomes a tool result for the model.

Each tool declares its arguments as a `ToolArgs` model: the JSON schema the model sees is generated
from it (every property a described string, as in AI4J's registry), and the model's arguments are
validated by it before the tool runs. A validation error, like any tool failure, goes back to the
model as a TOOL_ERROR result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import re
import traceback
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema
from teamctl.shared.agent.result_bounds import cut_note, cut_text, cut_to_fit
from teamctl.shared.errors import TeamError, ToolFailed
from teamctl.shared.text import echoed
from teamctl.shared.tracing import NO_SPAN, Attributes, Span

log = logging.getLogger(__name__)
UNKNOWN_TOOL_SPAN = "(unknown tool)"
"""What a trace calls a tool the model named that does not exist (never the model's text)."""
SPAN_ID_CHARS = 64
"""How much of a model's tool call id a span keeps: ids are short; a model's text is not."""
TOOL_ERROR_PREFIX = "TOOL_ERROR: "
"""How a tool's failure result starts (the model is told the rest as JSON)."""
ERROR_MAX_CHARS = 20_000
"""The longest error text a tool without a cap of its own gives the model (the team's own
tools; an argument error): whatever a model sends, what it hears back is bounded."""
RESULT_MAX_CHARS = 20_000
"""A Toolbox's cap on any result by default (the options' tool_result_max_chars default)."""
ERROR_WRAPPER_CHARS = 500
"""Room an error text leaves within its cap for the TOOL_ERROR JSON around it (its type, and
the tool's name and the call's id as echoed), so the whole result fits the cap."""


class InvalidArguments(ToolFailed):
    """The arguments of a tool call are not JSON, not an object, or do not fit the tool."""


class _FirstString:
    """Marks an argument read as AI4J's firstString (see ToolArgs)."""


FIRST_STRING = _FirstString()
Text = Annotated[str, FIRST_STRING]
"""An argument read as AI4J's firstString: numbers and booleans become text, blank values and
objects count as absent (the next alias is tried), the text is trimmed."""
OptionalText = Annotated[str | None, FIRST_STRING]


@dataclass(frozen=True)
class Fallback:
    """A required argument the tool fills in when the model leaves it out: the schema still lists
    it as required (as AI4J's registry does), but AI4J's tools supply a value.

    `value` is used as is; `context_key` names a value of the call's context instead (e.g. the
    task the member is executing).
    """

    value: str | None = None
    context_key: str | None = None


def either_case(*names: str) -> AliasChoices:
    """Each camelCase name followed by its snake_case spelling, in order (`taskId`, `task_id`);
    the first is the name the schema shows."""
    spelled: list[str] = []
    for name in names:
        spelled += [name] if to_snake(name) == name else [name, to_snake(name)]
    return AliasChoices(*dict.fromkeys(spelled))


class ToolArgs(BaseModel):
    """A tool's arguments: unknown keys are ignored (models add stray ones)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _read_as_ai4j(cls, data: Any, info: ValidationInfo) -> Any:
        """firstString for Text arguments, then the fallbacks of arguments still absent."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, field in cls.model_fields.items():
            aliases = _aliases(field.validation_alias) or [field.alias or name]
            if FIRST_STRING in field.metadata:
                _read_first_string(data, aliases)
            fallback = next((m for m in field.metadata if isinstance(m, Fallback)), None)
            if fallback is not None and not any(alias in data for alias in aliases):
                _fill_in(data, aliases[0], fallback, info.context or {})
        return data


def _read_first_string(data: dict[str, Any], aliases: list[str]) -> None:
    """Each alias's value as text, or dropped when it counts as absent (so the next is tried)."""
    for alias in aliases:
        text = _first_string_value(data.get(alias))
        if text is None:
            data.pop(alias, None)
        else:
            data[alias] = text


def _fill_in(
    data: dict[str, Any], alias: str, fallback: Fallback, context: Mapping[str, Any]
) -> None:
    value = fallback.value if fallback.context_key is None else context.get(fallback.context_key)
    if value is not None:  # no value to fall back on: the argument is reported missing
        data[alias] = value


def _aliases(alias: object) -> list[str]:
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return [alias] if isinstance(alias, str) else []


def _first_string_value(value: Any) -> str | None:
    """A value as AI4J's firstString reads it; None when it counts as absent."""
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        value = "true" if value else "false"
    return str(value).strip() or None


class NoArgs(ToolArgs):
    """A tool that takes no arguments."""


class RawArgs(ToolArgs):
    """A tool described by a JSON schema of its own (an MCP server's): every argument is kept,
    as given, for the tool to pass on (`raw`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @property
    def raw(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ToolResult(BaseModel):
    """A structured tool result, keys in camelCase: None-valued keys are left out (AI4J's results
    omit nulls), except those named in `KEEP_NONE`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    KEEP_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: core_schema.SerializerFunctionWrapHandler) -> dict[str, Any]:
        keep = {_serialized_name(self, name) for name in self.KEEP_NONE}
        return {k: v for k, v in handler(self).items() if v is not None or k in keep}


class ActionResult(ToolResult):
    """What every tool answers first: its name, and whether it did what was asked."""

    action: str
    ok: bool


def _serialized_name(model: BaseModel, name: str) -> str:
    field = type(model).model_fields[name]
    return field.serialization_alias or field.alias or name


class _ToolSchema(GenerateJsonSchema):
    """Parameters as the tool registry states them: each property its type and description,
    no titles, no defaults, and an optional argument simply not required (never null)."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> dict[str, Any]:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> dict[str, Any]:
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def parameters_schema(args: type[ToolArgs]) -> dict[str, Any]:
    """The `parameters` of a tool's function schema, generated from its arguments model."""
    schema: dict[str, Any] = json.loads(_parameters_json(args))  # fresh: callers may change it
    return schema


@functools.lru_cache(maxsize=256)  # ~0.2 ms a model, per model call otherwise
def _parameters_json(args: type[ToolArgs]) -> str:
    generated = args.model_json_schema(by_alias=True, schema_generator=_ToolSchema)
    schema = {
        "type": "object",
        "properties": generated.get("properties", {}),
        "required": generated.get("required", []),
    }
    if "$defs" in generated:  # nested models (Python tools' arguments) refer to them
        schema["$defs"] = generated["$defs"]
    return json.dumps(schema)


def precompute_schemas() -> None:
    """Generate every imported ToolArgs model's schema now, e.g. in a preloading RQ worker
    parent, so its forked jobs inherit them."""
    pending = [ToolArgs]
    while pending:
        args = pending.pop()
        pending.extend(args.__subclasses__())
        parameters_schema(args)


ToolFn = Callable[[Any], ToolResult | dict[str, Any] | str]
"""A tool: called with its validated arguments model."""


@dataclass(frozen=True)
class Tool:
    """One registered tool."""

    name: str
    description: str
    args: type[ToolArgs]
    fn: ToolFn
    context: Mapping[str, Any]
    """Values argument fallbacks may take (Fallback.context_key)."""
    parameters: str | None = None
    """A JSON schema given as is (RawArgs tools), instead of one generated from `args`."""
    max_chars: int | None = None
    """The longest error result this tool gives the model (tool_result_max_chars for Python and
    MCP tools, whose exceptions may carry anything; at most the Toolbox's cap); None:
    ERROR_MAX_CHARS (the team's own tools)."""
    safe_to_repeat: bool = False
    """Whether a call may run again when a crash left it in doubt (the tool only reads, or is
    idempotent): else the next attempt tells the model instead of running it."""

    def schema(self) -> dict[str, Any]:
        """The tool as an OpenAI-style function schema."""
        parameters = (
            json.loads(self.parameters) if self.parameters else parameters_schema(self.args)
        )
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }


class Toolbox:
    """Named tools with their argument models; `call` never raises, it answers the model, and
    never more than `max_result_chars` characters, whatever the tool answered."""

    def __init__(self, trace: Span = NO_SPAN, max_result_chars: int = RESULT_MAX_CHARS) -> None:
        self._tools: dict[str, Tool] = {}
        self.trace = trace
        """The span each call's `execute_tool` span is a child of (an agent's invocation)."""
        self.max_result_chars = max_result_chars
        """The run's or team's tool_result_max_chars: every result and error is cut to it."""

    def add(
        self,
        name: str,
        description: str,
        args: type[ToolArgs],
        fn: ToolFn,
        context: Mapping[str, Any] | None = None,
        *,
        max_chars: int | None = None,
        safe_to_repeat: bool = False,
    ) -> None:
        """Register a tool: its name, description, arguments model and function (and the cap
        on its error texts, and whether an in-doubt call of it may run again)."""
        self._tools[name] = Tool(
            name,
            description,
            args,
            fn,
            dict(context or {}),
            max_chars=self._error_cap(max_chars),
            safe_to_repeat=safe_to_repeat,
        )

    def add_raw(
        self,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        fn: Callable[[dict[str, Any]], ToolResult | dict[str, Any] | str],
        *,
        max_chars: int | None = None,
        safe_to_repeat: bool = False,
    ) -> None:
        """Register a tool whose JSON schema is given (an MCP server's): `fn` gets the model's
        arguments as a dict, unchecked here (the tool's owner validates them)."""
        self._tools[name] = Tool(
            name,
            description,
            RawArgs,
            lambda args: fn(args.raw),
            {},
            parameters=json.dumps(parameters),
            max_chars=self._error_cap(max_chars),
            safe_to_repeat=safe_to_repeat,
        )

    def _error_cap(self, max_chars: int | None) -> int:
        """A tool's cap on its errors, never past the Toolbox's on every result."""
        return min(max_chars or ERROR_MAX_CHARS, self.max_result_chars)

    def wrap(self, name: str, fn: ToolFn) -> None:
        """Give a registered tool a new function (one wrapping its own), keeping its place,
        schema and cap."""
        self._tools[name] = dataclasses.replace(self._tools[name], fn=fn)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        """A registered tool, to wrap it (added again under its name, it keeps its place)."""
        return self._tools.get(name)

    def safe_to_repeat(self, name: str) -> bool:
        """Whether an in-doubt call of tool `name` may run again (False for a tool not here)."""
        tool = self._tools.get(name)
        return tool is not None and tool.safe_to_repeat

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI-style function schemas, in registration order."""
        return [tool.schema() for tool in self._tools.values()]

    def call(self, name: str, raw_arguments: str, call_id: str = "") -> str:
        """Run a tool; unknown names, bad arguments and tool failures come back as TOOL_ERROR
        results; every result within max_result_chars (a longer one is cut, saying so)."""
        if self.trace is NO_SPAN:  # tracing off: not even the attributes are built
            return self._bounded_call(name, raw_arguments, call_id)
        # The model wrote the name: a trace names only the tools there are.
        known = name if name in self._tools else UNKNOWN_TOOL_SPAN
        with self.trace.child(
            f"execute_tool {known}", tool_call_attributes(known, call_id, raw_arguments)
        ) as span:
            result = self._bounded_call(name, raw_arguments, call_id)
            span.set(tool_result_attributes(result))
            return result

    def _bounded_call(self, name: str, raw_arguments: str, call_id: str) -> str:
        """The one place every result passes (team, workspace, Python and MCP tools, errors):
        a tool that forgot its own bound is cut here."""
        return bounded_result(self._call(name, raw_arguments, call_id), self.max_result_chars)

    def _call(self, name: str, raw_arguments: str, call_id: str) -> str:
        tool = self._tools.get(name)
        if tool is None:
            return tool_error(
                name,
                call_id,
                "UnknownTool",
                f"Unknown tool '{echoed(name)}'. Available tools: "
                f"{', '.join(self.names) or '(none)'}",
            )
        try:
            args = self.arguments(name, raw_arguments)
        except InvalidArguments as exc:
            return tool_error(
                name,
                call_id,
                type(exc).__name__,
                capped(str(exc), error_room(self._error_cap(None)), "error"),
            )
        return _run(tool, args, call_id)

    def arguments(self, name: str, raw_arguments: str) -> ToolArgs:
        """A call's arguments validated by the tool's model (blank means `{}`); InvalidArguments
        says what is wrong, naming arguments as the schema does."""
        tool = self._tools[name]
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidArguments(
                f"invalid tool arguments (not JSON: {exc.msg}): {echoed(raw_arguments)}"
            ) from exc
        if not isinstance(arguments, dict):
            raise InvalidArguments(
                f"invalid tool arguments (expected a JSON object): {echoed(raw_arguments)}"
            )
        try:
            return tool.args.model_validate(arguments, context=tool.context)
        except ValidationError as exc:
            raise InvalidArguments(argument_errors(exc)) from exc


TOOL_CALL_ID: ContextVar[str] = ContextVar("teamctl_tool_call_id", default="")
"""The id of the tool call being run (the model's), for the idempotency key a tool is given."""


def _run(tool: Tool, args: ToolArgs, call_id: str) -> str:
    calling = TOOL_CALL_ID.set(call_id)
    try:
        return _result_text(tool.fn(args))
    except (ToolFailed, TeamError) as exc:
        return tool_error(tool.name, call_id, type(exc).__name__, _error_text(tool, exc))
    except Exception as exc:  # a tool bug must not fail the task: the model hears about it
        text = _error_text(tool, exc)
        # The capped text and the frames, not log.exception: a message may be megabytes.
        log.error(
            "tool %s raised %s: %r\n%s",
            tool.name,
            type(exc).__name__,
            text,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
        return tool_error(tool.name, call_id, type(exc).__name__, text)
    finally:
        TOOL_CALL_ID.reset(calling)


def _result_text(result: ToolResult | dict[str, Any] | str) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json", by_alias=True)
    return json.dumps(result, ensure_ascii=False)


def _error_text(tool: Tool, exc: BaseException) -> str:
    """What the model is told of a tool's exception: its text (or class), capped as the tool
    says (ERROR_MAX_CHARS for the team's own tools, whose errors may quote the model)."""
    text = str(exc) or type(exc).__name__
    return capped(text, error_room(tool.max_chars or ERROR_MAX_CHARS), "error")


def error_room(max_chars: int) -> int:
    """How long an error text may be for its TOOL_ERROR result to fit `max_chars`."""
    return max(max_chars - ERROR_WRAPPER_CHARS, max_chars // 2)


def capped(text: str, max_chars: int, what: str = "result") -> str:
    """`text` within `max_chars` characters, its note included, cut and saying so when longer:
    one cap for a tool's results and its errors alike, so nothing a tool says can flood the
    model's context."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - len(cut_note(what, len(text), max_chars)), 0)
    return cut_text(text, keep, what)


def bounded_result(result: str, max_chars: int) -> str:
    """A tool's answer within `max_chars`: as it is when it fits; a TOOL_ERROR with its error
    text cut (still JSON); anything else cut as text. Each cut says so."""
    if len(result) <= max_chars:
        return result
    if result.startswith(TOOL_ERROR_PREFIX):
        with contextlib.suppress(ValueError, TypeError):
            payload = json.loads(result[len(TOOL_ERROR_PREFIX) :])
            if isinstance(payload, dict) and isinstance(payload.get("error"), str):
                error = cut_to_fit(payload, ["error"], max_chars - len(TOOL_ERROR_PREFIX))
                text = TOOL_ERROR_PREFIX + json.dumps(error, ensure_ascii=False)
                if len(text) <= max_chars:
                    return text
    return capped(result, max_chars)


def argument_errors(exc: ValidationError) -> str:
    """What is wrong with the arguments, one clause per problem, naming each argument as the
    schema does ("toMemberId is required")."""
    return "; ".join(_argument_error(error) for error in exc.errors(include_url=False))


def _argument_error(error: Mapping[str, Any]) -> str:
    # An unknown argument's name is the model's own text: an extra key may be megabytes long.
    name = echoed(".".join(str(part) for part in error["loc"])) or "arguments"
    if error["type"] == "missing":
        return f"{name} is required"
    if error["type"] == "value_error":
        return f"{name} {error['ctx']['error']}"
    return f"{name}: {error['msg']}"


def tool_call_attributes(name: str, call_id: str, raw_arguments: str) -> Attributes:
    """An execute_tool span's GenAI attributes: names, ids and sizes, never the arguments."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id[:SPAN_ID_CHARS] or None,
        "teamctl.tool.arguments_bytes": len(raw_arguments.encode()),
    }


ERROR_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""What a tool error's type looks like (ValueError, TIMEOUT, ...)."""


def tool_result_attributes(result: str) -> Attributes:
    """What an execute_tool span says of the result: its size, and the error's type if any.

    A Python or MCP tool's own text may also start like a tool error (a fetched page can say
    anything), so only a type shaped like teamctl's names reaches the span."""
    error_type = None
    if result.startswith(TOOL_ERROR_PREFIX):
        with contextlib.suppress(ValueError, AttributeError):
            found = json.loads(result[len(TOOL_ERROR_PREFIX) :]).get("errorType")
            error_type = found if isinstance(found, str) and ERROR_TYPE.fullmatch(found) else None
    return {"teamctl.tool.result_chars": len(result), "error.type": error_type}


def tool_error(tool: str, call_id: str, error_type: str, message: str) -> str:
    """AI4J's tool error text: `TOOL_ERROR: {"errorType", "error", "tool", "callId"}`."""
    # The tool's name and the call's id come from the model's reply too (an unknown tool's).
    return TOOL_ERROR_PREFIX + json.dumps(
        {
            "errorType": error_type,
            "error": message,
            "tool": echoed(tool),
            "callId": echoed(call_id),
        },
        ensure_ascii=False,
    )
