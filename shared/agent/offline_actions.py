"""What the built-in offline model does with tools: deterministic moves that show a team at work.

A planned run's member reads its messages and the board, calls each of its own (Python or MCP)
tools once, tells the members of the tasks waiting on its own that it is done, then answers. A
persistent teammate completes the tasks claimed for it (in plan mode, once the lead approved its
plan), answers the lead's messages, and approves a shutdown request. The lead lists its
teammates, then spawns the ones the person names ("called carol"), adds the tasks they list
("tasks: draft the intro; review it"), asks the ones they name to shut down, messages the one they
tell something to ("tell alice: ..."), and approves every plan sent to it.

Each move is decided from the conversation alone (the system prompt, the messages, the calls
already made and their results), so a replayed conversation gets the same moves, and a call is
never made twice for the same thing, even when it failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from teamctl.shared.agent.tool_names import RESERVED_PREFIX, TEAMMATE_TOOLS, WORKSPACE_TOOLS
from teamctl.shared.text import one_line

Message = dict[str, Any]

_INBOX = re.compile(r"<inbox>\n(.*?)\n</inbox>", re.S)
_HELD = re.compile(r"\bYou (?:now|still) hold (task_\d+(?:, task_\d+)*)")
"""How a task.assigned or task.reminder message names the tasks held (their subjects may name
other tasks): the texts of team_task_text in _lib/team.lua and of turn_end.lua."""
_NAME = r"[a-z][a-z0-9_-]{0,31}"
# A name in a list: not a keyword, and followed by a separator, "as", "who" or the end.
_LISTED = (
    rf"(?!(?:who|as|and)\b){_NAME}"
    r"(?=\s*(?:,|\band\b|[.;:!?]|$|\bas\b|\bwho\b))"
)
_NAMES = rf"{_LISTED}(?:\s*(?:,|\band\b)\s*{_LISTED})*"
_SPAWN = re.compile(r"\b(?:spawn|start|hire|create|add)\b", re.I)
_NAMES_AFTER = re.compile(rf"\b(?:called|named)\s+({_NAMES})", re.I | re.M)
_ROLE = re.compile(
    r"\bas (?:an? |the )?([a-z][\w-]{0,31})"
    r"|\bwho ([a-z][\w -]{0,59}?)\s*(?:[.;,]|$)",
    re.I | re.M,
)
_TASKS = re.compile(r"\btasks?:\s*(.+)", re.I | re.S)
_TELL = re.compile(rf"\b(?:tell|ask|message)\s+({_NAME})\b[:,]?\s*(.*)", re.I | re.S)
_STOP_VERB = r"\b(?:shut\s*down|stop)"
_SHUTDOWN = re.compile(
    # Names here count only when they are teammates, so the list need not end cleanly.
    rf"{_STOP_VERB}\s+({_NAME}(?:\s*(?:,|\band\b)\s*{_NAME})*)"  # "shut down carol and bob"
    rf"|\b(?:ask|tell)\s+({_NAME})\s+to\s+{_STOP_VERB}\b",
    re.I | re.M,
)  # "ask carol to stop"
_EVERYONE = {"everyone", "everybody", "all"}
_SPLIT = re.compile(r"\s*(?:,|\band\b)\s*", re.I)
DEMO_TEXT = "offline demo"
"""What the offline model passes for a text argument it has nothing better for."""


@dataclass(frozen=True)
class Call:
    """One tool call the offline model makes: the tool's name and its arguments."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Act:
    """The offline model's reply: tool calls, or (none left to make) its final answer."""

    calls: list[Call] = field(default_factory=list)
    text: str = ""


@dataclass(frozen=True)
class Made:
    """A call already in the conversation, with its result (None until it has one)."""

    name: str
    args: dict[str, Any]
    result: Any


class Conversation:
    """The messages of one model call, read the way the offline model needs them."""

    def __init__(self, messages: list[Message], tools: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.schemas = {
            t["function"]["name"]: t["function"].get("parameters") or {}
            for t in tools
            if t.get("type") == "function"
        }

    @property
    def system(self) -> str:
        return "\n".join(text_of(m) for m in self.messages if m.get("role") == "system")

    def current(self) -> list[Message]:
        """The messages since the last final answer (a turn's, when memory holds earlier ones)."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if message.get("role") == "assistant" and not message.get("tool_calls"):
                return self.messages[index + 1 :]
        return [m for m in self.messages if m.get("role") != "system"]

    def made(self, messages: list[Message] | None = None) -> list[Made]:
        """The calls in `messages` (the current ones by default), in order."""
        messages = self.current() if messages is None else messages
        results = {
            m.get("tool_call_id"): _json(text_of(m)) for m in messages if m.get("role") == "tool"
        }
        return [
            Made(
                str(function.get("name") or ""),
                _args(function.get("arguments")),
                results.get(call.get("id")),
            )
            for m in messages
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
            if isinstance(call, dict)
            for function in [call.get("function") or {}]
        ]

    def inbox(self, messages: list[Message] | None = None) -> list[dict[str, Any]]:
        """The inbox lines `messages` (the current ones by default) carry: each `<inbox>`
        block's JSON objects."""
        messages = self.current() if messages is None else messages
        lines = [
            _json(line)
            for m in messages
            if m.get("role") == "user"
            for block in _INBOX.findall(text_of(m))
            for line in block.splitlines()
        ]
        return [line for line in lines if isinstance(line, dict)]

    def said(self) -> str:
        """What the person wrote in the current messages, inbox blocks left out."""
        texts = [
            _INBOX.sub("", text_of(m)).strip() for m in self.current() if m.get("role") == "user"
        ]
        return "\n".join(text for text in texts if text)

    def call(self, tool: str, /, **args: Any) -> Call:
        """A call of `tool` with `args` spelled as its schema spells them (taskId, task_id)."""
        properties = self.schemas.get(tool, {}).get("properties") or {}
        spelled = {_squash(key): key for key in properties}
        return Call(tool, {spelled.get(_squash(key), key): value for key, value in args.items()})

    def own_tools(self) -> list[Call]:
        """One call of each tool neither the team's nor the workspace's (Python and MCP tools),
        with arguments made from its schema."""
        return [
            Call(name, example_args(schema))
            for name, schema in self.schemas.items()
            if not name.startswith(RESERVED_PREFIX)
            and name not in WORKSPACE_TOOLS
            and name not in TEAMMATE_TOOLS
        ]


def example_args(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a JSON schema's required properties: its default, first enum value, or a
    plain value of its type."""
    properties = schema.get("properties") or {}
    return {name: _example(properties.get(name) or {}) for name in schema.get("required") or []}


def _example(schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        return _example(options[0]) if options else DEMO_TEXT
    return {
        "integer": 1,
        "number": 1,
        "boolean": True,
        "array": [],
        "object": {},
        "null": None,
    }.get(kind, DEMO_TEXT)


# --- a planned run's member --------------------------------------------------------------------


def member_act(conv: Conversation, task_id: str, answer: str) -> Act:
    """Read, call own tools (write its answer to notes/TASK.md when it may write files), tell
    the dependents' members, then answer `answer`."""
    made = conv.made()
    if not made:
        first = [
            conv.call(name)
            for name in ("team_read_messages", "team_list_tasks")
            if name in conv.schemas
        ]
        first += conv.own_tools()
        if "write_file" in conv.schemas:  # what it did, where `teamctl files` shows it
            first.append(conv.call("write_file", path=f"notes/{task_id}.md", content=f"{answer}\n"))
        if first:
            return Act(calls=first)
    if "team_send_message" in conv.schemas and not _called(made, "team_send_message"):
        tell = [
            conv.call(
                "team_send_message",
                to_member_id=member,
                content=f"{task_id} is done, which your task waits on: {answer}",
            )
            for member in _dependents(made, task_id)
        ]
        if tell:
            return Act(calls=tell)
    return Act(text=answer)


def _dependents(made: list[Made], task_id: str) -> list[str]:
    """The members of the tasks that depend on `task_id`, from a team_list_tasks result."""
    listed = next((m.result for m in made if m.name == "team_list_tasks"), None)
    tasks = listed.get("tasks") if isinstance(listed, dict) else None
    if not isinstance(tasks, list):
        return []
    tasks = [t for t in tasks if isinstance(t, dict) and isinstance(t.get("memberId"), str)]
    mine = next((t["memberId"] for t in tasks if t.get("taskId") == task_id), None)
    return sorted(
        {
            t["memberId"]
            for t in tasks
            if task_id in (t.get("dependsOn") or []) and t["memberId"] != mine
        }
    )


# --- a persistent teammate ---------------------------------------------------------------------


def teammate_act(conv: Conversation, header: str, answer: str) -> Act:
    """Own tools once, tasks completed (after an approved plan in plan mode), the lead's
    messages answered; then a shutdown approved; then `answer`. `header`: "[role] name"."""
    made, lines, ever = conv.made(), conv.inbox(), conv.made(conv.messages)
    calls = [call for call in conv.own_tools() if not _called(ever, call.name)]
    calls += _task_moves(conv, made, lines, header)
    replies = "\n".join(str(m.args.get("content", "")) for m in made if m.name == "send_message")
    calls += [
        conv.call(
            "send_message",
            to="lead",
            content=f"{header}: got {line['id']}: {one_line(str(line.get('content', '')), 80)}",
        )
        for line in lines
        if line.get("from") == "lead"
        and line.get("type") == "peer.message"
        and line.get("id")
        and f": got {line['id']}: " not in replies
    ]
    if calls:
        return Act(calls=calls)
    shutdowns = [
        conv.call(
            "respond_shutdown",
            request_id=line["request_id"],
            approve=True,
            reason="nothing left to do",
        )
        for line in lines
        if line.get("type") == "shutdown_request"
        and line.get("request_id")
        and not _called(made, "respond_shutdown")
    ]
    return Act(calls=shutdowns[:1]) if shutdowns else Act(text=answer)


def _task_moves(
    conv: Conversation, made: list[Made], lines: list[dict[str, Any]], header: str
) -> list[Call]:
    """complete_task for each task claimed for the teammate; in plan mode, until the lead
    approves, submit_plan instead (an unapproved teammate is handed no task)."""
    if "Plan mode: on:" in conv.system:  # "on, and your plan is approved" reads otherwise
        if _plan_pending(conv) or _called(made, "submit_plan"):
            return []
        return [
            conv.call(
                "submit_plan",
                plan=f"{header}: take each task the board hands me, "
                "do it, and complete it with its result.",
            )
        ]
    held = sorted(
        {
            task
            for line in lines
            if str(line.get("type", "")).startswith("task.")
            for found in _HELD.findall(str(line.get("content", "")))
            for task in found.split(", ")
        }
    )
    return [
        conv.call("complete_task", task_id=task, result=f"{header}: did {task}.")
        for task in held
        if not _called(made, "complete_task", task)
    ]


def _plan_pending(conv: Conversation) -> bool:
    """Whether a plan was submitted and not yet answered (asking again would be refused)."""
    submitted = [
        m
        for m in conv.made(conv.messages)
        if m.name == "submit_plan" and isinstance(m.result, dict) and m.result.get("ok")
    ]
    answers = [
        line for line in conv.inbox(conv.messages) if line.get("type") == "plan_approval_response"
    ]
    return len(submitted) > len(answers)


# --- the lead of a persistent team -------------------------------------------------------------


def lead_act(conv: Conversation, header: str, answer: str) -> Act:
    """List the teammates, then do what the person asked; then answer with what was done."""
    made, said, lines = conv.made(), conv.said(), conv.inbox()
    if said and "list_teammates" in conv.schemas and not _called(made, "list_teammates"):
        return Act(calls=[conv.call("list_teammates")])
    known = _teammates(made)
    calls = [
        conv.call(
            "review_plan",
            request_id=line["request_id"],
            approve=True,
            feedback="approved by the offline lead",
        )
        for line in lines
        if line.get("type") == "plan_approval_request"
        and line.get("request_id")
        and not _called(made, "review_plan", line["request_id"])
    ]
    spawns = _spawns(conv, made, said, known)
    calls += spawns
    calls += _tasks(conv, made, said, [c.args[_arg(c, "name")] for c in spawns])
    calls += _shutdowns(conv, made, said, known)
    calls += _tells(conv, made, said, known)
    if calls:
        return Act(calls=calls)
    done = [_done(m) for m in made if m.name != "list_teammates"]
    if done:
        return Act(text=f"{header} {'; '.join(done)}.")
    # A turn of mail alone (no request from the person) says what arrived.
    return Act(text=answer if said else f"{header} read {len(lines)} new inbox message(s).")


def _spawns(conv: Conversation, made: list[Made], said: str, known: set[str]) -> list[Call]:
    if not _SPAWN.search(said):
        return []
    found = _ROLE.search(said)
    role = (found.group(1) or found.group(2)) if found else "helper"
    names = dict.fromkeys(
        name
        for match in _NAMES_AFTER.finditer(said)
        for name in _SPLIT.split(match.group(1).lower())
        if name
    )
    return [
        conv.call("spawn_teammate", name=name, role=role, prompt=said)
        for name in names
        if name not in known and not _called(made, "spawn_teammate", name)
    ]


def _tasks(conv: Conversation, made: list[Made], said: str, spawned: list[str]) -> list[Call]:
    """The tasks listed after "tasks:"; those of a request that spawns teammates are reserved
    for them in turn (else an idle teammate would take them before the new one is ready)."""
    match = _TASKS.search(said)
    subjects = [s.strip(" .") for s in re.split(r";|\n", match.group(1))] if match else []
    subjects = [s for s in subjects if s and not _called(made, "create_task", s)]
    return [
        conv.call(
            "create_task",
            subject=subject,
            **({"assignee": spawned[index % len(spawned)]} if spawned else {}),
        )
        for index, subject in enumerate(subjects)
    ]


def _shutdowns(conv: Conversation, made: list[Made], said: str, known: set[str]) -> list[Call]:
    """request_shutdown for the teammates named right after "shut down" or "stop" (or all of
    them for "everyone"), or in "ask NAME to stop"."""
    named: set[str] = set()
    for match in _SHUTDOWN.finditer(said):
        listed = {n for n in _SPLIT.split((match.group(1) or match.group(2)).lower()) if n}
        named |= known if listed & _EVERYONE else listed & known
    return [
        conv.call("request_shutdown", name=name, reason=one_line(said, 80))
        for name in sorted(named)
        if not _called(made, "request_shutdown", name)
    ]


def _tells(conv: Conversation, made: list[Made], said: str, known: set[str]) -> list[Call]:
    """send_message for the first "tell NAME: text" naming a teammate (not a stop request)."""
    for match in _TELL.finditer(said):
        name, text = match.group(1).lower(), match.group(2).strip()
        if name not in known or not text or re.match(rf"to\s+{_STOP_VERB}\b", text, re.I):
            continue
        return (
            []
            if _called(made, "send_message", name)
            else [conv.call("send_message", to=name, content=text)]
        )
    return []


def _arg(call: Call, name: str) -> str:
    """The key of `call`'s argument `name` as its schema spells it."""
    return next(key for key in call.args if _squash(key) == _squash(name))


def _teammates(made: list[Made]) -> set[str]:
    """The names a list_teammates result gave (none shut down counts as gone)."""
    listed = next((m.result for m in made if m.name == "list_teammates"), None)
    mates = listed.get("teammates") if isinstance(listed, dict) else None
    return {
        m["name"]
        for m in mates or []
        if isinstance(m, dict) and m.get("name") and m.get("status") != "shutdown"
    }


def _done(made: Made) -> str:
    """One clause saying what a call did ("spawned carol", "created task_2", "failed to ...")."""
    result = made.result if isinstance(made.result, dict) else {}
    first = next(iter(made.args.values()), "")
    if not result.get("ok"):
        return f"could not {made.name} {first}".rstrip()
    clauses = {
        "spawn_teammate": f"spawned {first}",
        "create_task": f"created {result.get('task_id', 'a task')} ({first})",
        "request_shutdown": f"asked {first} to shut down",
        "review_plan": f"approved plan {first}",
        "send_message": f"messaged {first}",
    }
    return clauses.get(made.name, made.name)


# --- reading the conversation ------------------------------------------------------------------


def _called(made: list[Made], name: str, about: Any = None) -> bool:
    """Whether `name` was called (with `about` as one of its arguments' values)."""
    return any(m.name == name and (about is None or about in m.args.values()) for m in made)


def _args(raw: Any) -> dict[str, Any]:
    """A call's arguments as a dict ({} for anything else a model may have written)."""
    value = _json(raw) if isinstance(raw, str) else raw
    return value if isinstance(value, dict) else {}


def _squash(key: str) -> str:
    return key.replace("_", "").lower()


def text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def tool_calls(act: Act, messages: list[Message]) -> Iterator[dict[str, Any]]:
    """The calls as OpenAI tool_calls, with ids past every `offline_<n>` id in `messages` (a
    count would repeat ids once memory caps drop old messages)."""
    taken = [
        int(found.group(1))
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
        if isinstance(call, dict)
        for found in [re.fullmatch(r"offline_(\d+)", str(call.get("id", "")))]
        if found
    ]
    first = max(taken, default=-1) + 1
    for index, call in enumerate(act.calls):
        yield {
            "id": f"offline_{first + index}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.args)},
        }
