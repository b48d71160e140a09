"""Every Redis key teamctl uses is built here, and nowhere else.

A task board and a message bus live in a key space (`KeySpace`): a planned run's (`RunKeys`) or a
persistent team's (`TeamKeys`), each under its own base. All keys of one space share the base's hash
tag (``{RUN_ID}`` for a run) so that the space lives in one cluster slot and every Lua script
touches one slot only. Task and member ids are validated before they are joined into a key.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from teamctl.shared.ids import (
    check_call_name,
    check_member_id,
    check_request_id,
    check_run_id,
    check_task_id,
    check_team_name,
)

PREFIX = "teamctl"
BLOB_ID = re.compile(r"[0-9a-f]{32}")
"""A workspace blob's id: random, hex."""
FORK_NONCE = re.compile(r"[0-9a-f]{12}")
"""One `teamctl team fork` command's id for the keys it stages its copy in: random, hex."""
RUNS_INDEX = f"{PREFIX}:runs"
"""Sorted set of run ids scored by creation time (ms); the `teamctl runs` listing."""
RUNS_STARTED = f"{PREFIX}:runs:started"
"""Stream of `run_id` entries, one per run created (capped to the last ~1000): the dashboard's
runs page follows it to show a run that starts while the page is open."""
TEAMS_INDEX = f"{PREFIX}:teams"
"""Sorted set of team names scored by creation time (ms); the `teamctl teams` listing."""


LIMITS_SALT = f"{PREFIX}:limits:salt"
"""String: the random key of the digests that name provider accounts, shared by every worker
(set once, never expires: a new one would split every account's buckets)."""
DIGEST_HEX = re.compile(r"[0-9a-f]{16,64}")
"""A provider account's or a model string's digest in a key."""


@dataclass(frozen=True)
class LimitKeys:
    """The keys of one provider account's limits, under its digest's hash tag (one slot)."""

    account_digest: str

    def __post_init__(self) -> None:
        if not DIGEST_HEX.fullmatch(self.account_digest):
            raise ValueError(f"not an account digest: {self.account_digest!r}")

    @property
    def account(self) -> str:
        """Hash with TTL: the account's pause (paused_until ms, backoff_ms) after a 429."""
        return f"{PREFIX}:limits:{{{self.account_digest}}}:account"

    def bucket(self, model_digest: str) -> str:
        """Hash with TTL: one model's RPM/TPM bucket on the account (the model string, learned
        rpm and tpm, arrival times tat_req and tat_tok, paused_until ms)."""
        if not DIGEST_HEX.fullmatch(model_digest):
            raise ValueError(f"not a model digest: {model_digest!r}")
        return f"{PREFIX}:limits:{{{self.account_digest}}}:model:{model_digest}"


class KeySpace(ABC):
    """The keys a task board and a message bus use, all under ``teamctl:KIND:{NAME}``; a
    subclass says what kind of space it is and its name."""

    @property
    @abstractmethod
    def kind(self) -> str:
        """What owns the space ("run"), in its keys and in messages."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The owner's id (a checked run id): the hash tag of every key of the space."""

    @property
    def base(self) -> str:
        """The prefix of every key of the space."""
        return f"{PREFIX}:{self.kind}:{{{self.name}}}"

    @property
    def label(self) -> str:
        """How messages name the space, e.g. "run 20240101-120000-ab12cd"."""
        return f"{self.kind} {self.name}"

    @property
    def order(self) -> str:
        """List: task ids in plan order."""
        return f"{self.base}:order"

    @property
    def ready(self) -> str:
        """Sorted set: ready task ids scored by plan position."""
        return f"{self.base}:ready"

    @property
    def running(self) -> str:
        """Set: task ids in progress (scanned for expired heartbeats)."""
        return f"{self.base}:running"

    @property
    def counts(self) -> str:
        """Hash: number of tasks per status."""
        return f"{self.base}:counts"

    @property
    def unanswered(self) -> str:
        """Sorted set: failed and blocked task ids scored by plan position, kept by the planned
        board's scripts (a team's do not), so `teamctl status` lists them without reading the
        whole board; no task leaves either status."""
        return f"{self.base}:unanswered"

    @property
    def reservations(self) -> str:
        """Sorted set: the budget reservations of model calls in flight (`id:tokens:usd`),
        scored by when they expire (epoch ms), so a dead worker's comes back to the budget."""
        return f"{self.base}:reservations"

    @property
    def tokens(self) -> str:
        """String counter: the last fencing token issued on this board."""
        return f"{self.base}:tokens"

    @property
    def events(self) -> str:
        """Stream: task state changes, read by the coordinator with XREAD BLOCK (fields:
        task_id, status, token, member_id, attempts, and worker: the claim's host:pid, which on
        an `in_progress` entry names the process that made that attempt)."""
        return f"{self.base}:events"

    @property
    def bus(self) -> str:
        """Stream: every message of the space, in order."""
        return f"{self.base}:bus"

    def task(self, task_id: str) -> str:
        """Hash: one task's state."""
        return f"{self.base}:task:{check_task_id(task_id)}"

    def heartbeat(self, task_id: str) -> str:
        """String with TTL: present while the claim on the task is alive."""
        return f"{self.base}:hb:{check_task_id(task_id)}"

    def inbox(self, member_id: str) -> str:
        """Stream: the messages delivered to one member, by bus id (entry field: seq)."""
        return f"{self.base}:inbox:{check_member_id(member_id)}"

    @property
    def read_offsets(self) -> str:
        """Hash: member id -> id of the last message that member has read."""
        return f"{self.base}:offsets"

    @property
    def unacked_reads(self) -> str:
        """Hash: '<member>:<task>' -> what that task's attempt read as the member and has not yet
        given its model (JSON: token, bus ids, seq of the first), delivered again if it is lost."""
        return f"{self.base}:unacked"

    @property
    def bus_seq(self) -> str:
        """String counter: messages ever published on the bus (positions, for safe trimming)."""
        return f"{self.base}:bus_seq"

    @property
    def roster(self) -> str:
        """Sorted set: the member ids the bus fans out to and trims against, scored by position
        (a run writes it once, with its spec; a team changes it as members come and go)."""
        return f"{self.base}:roster"

    @property
    def roster_ver(self) -> str:
        """String counter: bumped in the transaction of every roster change, so a bus can cache
        the roster and its scripts can refuse a stale copy."""
        return f"{self.base}:roster_ver"

    @property
    def lead_has_inbox(self) -> bool:
        """Whether `lead` gets an inbox of its own (a team's lead reads its mail; a run's
        coordinator reads the whole bus instead)."""
        return False

    @property
    def files(self) -> str:
        """Hash: workspace path -> the blob id of its content, for a workspace kept in Redis."""
        return f"{self.base}:files"

    def file_blob(self, blob_id: str) -> str:
        """String: one saved content of a workspace file (bytes), named by a random id; set with
        a TTL until a save adopts it, so content whose save never happened goes away."""
        if not BLOB_ID.fullmatch(blob_id):
            raise ValueError(f"invalid blob id {blob_id[:40]!r}: expected 32 hex digits")
        return f"{self.base}:blob:{blob_id}"

    @property
    def file_versions(self) -> str:
        """Hash: workspace path -> version of its last save; a deleted file keeps its version
        for a while (`file_deletions`), so a writer that saw the file before the delete is
        refused naming the delete."""
        return f"{self.base}:file_versions"

    @property
    def file_deletions(self) -> str:
        """Sorted set: deleted workspace paths scored by when they were deleted (ms), the index
        that drops their `file_versions` records in bounded batches once they are old."""
        return f"{self.base}:file_deletions"

    @property
    def files_info(self) -> str:
        """Hash: `bytes` (what the workspace keeps: content, paths and a record's cost per
        path), `rev` (saves ever made, so a mirror that saw the current rev knows it has nothing
        to fetch) and `floor` (the highest version of a dropped record: none is used again)."""
        return f"{self.base}:files_info"

    @property
    def model_usage(self) -> str:
        """Hash: usage per model that answered (`MODEL prompt_tokens`, `MODEL completion_tokens`,
        `MODEL cost_usd`, `MODEL calls`, `MODEL fallback_calls`, `MODEL unpriced`): the
        breakdown of `usage` (shared/agent/model_usage.py; written by fallbacks.py ModelLedger)."""
        return f"{self.base}:usage:models"

    def all_patterns(self) -> str:
        """A SCAN pattern matching every key of the space."""
        return f"{self.base}:*"


@dataclass(frozen=True)
class RunKeys(KeySpace):
    """The keys of one run: its board and bus, and the run's own records."""

    run_id: str

    def __post_init__(self) -> None:
        check_run_id(self.run_id)

    @property
    def kind(self) -> str:
        return "run"

    @property
    def name(self) -> str:
        return self.run_id

    @property
    def spec(self) -> str:
        """String: the immutable RunSpec JSON (objective, team, options, models)."""
        return f"{self.base}:spec"

    @property
    def state(self) -> str:
        """Hash: run status, rounds, times, plan, approval, error, the final output and the
        run's trace (traceparent) when it is traced."""
        return f"{self.base}:state"

    @property
    def lease(self) -> str:
        """String with TTL: the coordinator that drives the run."""
        return f"{self.base}:lease"

    @property
    def cancel(self) -> str:
        """String: present when the run was cancelled."""
        return f"{self.base}:cancel"

    @property
    def approval(self) -> str:
        """List: wake-ups for a coordinator waiting on plan approval (the decision is in state)."""
        return f"{self.base}:approval"

    @property
    def usage(self) -> str:
        """Hash: run-wide token and cost totals, for budgets."""
        return f"{self.base}:usage"

    def transcript(self, task_id: str) -> str:
        """String: the JSON transcript (messages and tool results) of the attempt that ended
        the task, capped at `transcript_max_chars`."""
        return f"{self.base}:transcript:{check_task_id(task_id)}"

    def journal(self, task_id: str) -> str:
        """List: the task's step journal (JSON entries: each model reply, then its tool
        results), appended while a claim holds, so a reclaimed task's next attempt replays the
        steps already paid for instead of making them again."""
        return f"{self.base}:journal:{check_task_id(task_id)}"

    @property
    def reuse(self) -> str:
        """Hash: task id -> JSON TaskReuse, what each task of a replayed or forked run takes from
        its source run (its output, or the first steps of its journal)."""
        return f"{self.base}:reuse"

    @property
    def forks(self) -> str:
        """Set: the runs replayed or forked from this one (the run page links them)."""
        return f"{self.base}:forks"

    def model_call(self, call: str) -> str:
        """Hash: the coordinator's model call `call` (planner, synthesizer), run as a job: its
        request, attempt, the attempt a worker began, and the outcome."""
        return f"{self.base}:call:{check_call_name(call)}"

    def model_call_beat(self, call: str) -> str:
        """String with TTL: present while a worker is making that call's current attempt."""
        return f"{self.base}:call_beat:{check_call_name(call)}"

    @property
    def mcp_tools(self) -> str:
        """Hash: MCP server name -> JSON list of its tools, as the first worker to start the
        server listed them (dispatch inputs name a member's MCP tools from it)."""
        return f"{self.base}:mcp_tools"

    @property
    def mcp_listing(self) -> str:
        """Hash: MCP server name -> JSON McpListing, what the job that lists servers for the
        planner found (listed, or why not)."""
        return f"{self.base}:mcp_listing"

    @property
    def mcp_listed(self) -> str:
        """List: wake-ups for a coordinator waiting on the MCP listing job."""
        return f"{self.base}:mcp_listed"

    @property
    def model_call_done(self) -> str:
        """List: wake-ups for a coordinator waiting on a model call's outcome."""
        return f"{self.base}:call_done"


@dataclass(frozen=True)
class TeamKeys(KeySpace):
    """The keys of one persistent team: its bus (with a lead inbox), its teammates, their turn
    leases and memories. Team keys never expire; `teamctl team delete` removes them."""

    team: str

    def __post_init__(self) -> None:
        check_team_name(self.team)

    @property
    def kind(self) -> str:
        return "team"

    @property
    def name(self) -> str:
        return self.team

    @property
    def lead_has_inbox(self) -> bool:
        return True

    @property
    def meta(self) -> str:
        """String: the team's options (TeamOptions JSON) and creation time."""
        return f"{self.base}:meta"

    @property
    def usage(self) -> str:
        """Hash: the team's token and cost totals (every teammate's and the lead's model calls),
        for its budget; the same fields as a run's `usage`."""
        return f"{self.base}:usage"

    @property
    def lead_lease(self) -> str:
        """String with TTL: the owner (host:pid:nonce) of the `teamctl lead` driving the team;
        it fences the lead's memory checkpoints."""
        return f"{self.base}:lead:lease"

    @property
    def lead_memory(self) -> str:
        """List: the lead agent's chat messages (JSON), appended by its checkpoints; its inbox
        offset is the 'lead' field of `read_offsets`."""
        return f"{self.base}:lead:memory"

    @property
    def lead_memory_size(self) -> str:
        """Hash: the lead's memory size (chars: characters of its messages' JSON, last_user:
        index of its last user message), kept by its checkpoints so none walks the memory; and
        its place in its turns (seq: messages committed since the memory began, turns: turns
        begun since, epoch: how often `--new` began it again)."""
        return f"{self.base}:lead:memory_size"

    @property
    def lead_turns(self) -> str:
        """Stream: the lead's turns as they begin and end (shared/teams/transcripts.py), so its
        memory reads turn by turn."""
        return f"{self.base}:lead:turns"

    @property
    def lead_inbox(self) -> str:
        """Hash: the lead inbox's retention record (shared/teams/lead_inbox.py): how much of it was
        counted, what the lead's model has seen, the open summary of folded notices, and how far
        the bus was compacted around the lead's unread mail."""
        return f"{self.base}:lead:inbox"

    def teammate(self, name: str) -> str:
        """Hash: one teammate's record (Teammate in shared/teams/teammates.py)."""
        return f"{self.base}:mate:{check_member_id(name)}"

    def turn(self, name: str) -> str:
        """String with TTL: the token of the teammate's live turn, refreshed while it runs."""
        return f"{self.base}:turn:{check_member_id(name)}"

    def effects(self, name: str) -> str:
        """Hash: the outcomes of the team writes of the teammate's current step's tool calls, so
        a rerun replays them instead of writing twice; cleared by every checkpoint."""
        return f"{self.base}:effects:{check_member_id(name)}"

    def memory(self, name: str) -> str:
        """List: the teammate's chat messages (JSON), appended by turn checkpoints."""
        return f"{self.base}:memory:{check_member_id(name)}"

    def turns(self, name: str) -> str:
        """Stream: the teammate's turns as they begin and end (shared/teams/transcripts.py), so
        its memory reads turn by turn."""
        return f"{self.base}:turns:{check_member_id(name)}"

    def fork_memory(self, name: str, nonce: str) -> str:
        """List with TTL: the memory of a teammate being forked as `name`, copied page by page
        before `team_fork.lua` renames it to the fork's memory in one step (`nonce`: one fork
        command's, so two forks to one name never mix their copies)."""
        return f"{self._forking(name, nonce)}:memory"

    def fork_turns(self, name: str, nonce: str) -> str:
        """Stream with TTL: the turn marks copied for that fork, renamed with its memory."""
        return f"{self._forking(name, nonce)}:turns"

    def _forking(self, name: str, nonce: str) -> str:
        if not FORK_NONCE.fullmatch(nonce):
            raise ValueError(f"not a fork nonce: {nonce[:40]!r}")
        return f"{self.base}:forking:{check_member_id(name)}:{nonce}"

    def teammate_requests(self, name: str) -> str:
        """Set: the ids of the protocol requests opened in the teammate's current life (to it or
        from it), so its re-spawn expires those still pending."""
        return f"{self.base}:mate_requests:{check_member_id(name)}"

    def request(self, request_id: str) -> str:
        """Hash: one protocol request's record (TeamRequest in shared/teams/teammates.py)."""
        return f"{self.base}:request:{check_request_id(request_id)}"

    @property
    def requests(self) -> str:
        """Sorted set: request ids scored by creation time (ms), for listings."""
        return f"{self.base}:requests"

    @property
    def task_seq(self) -> str:
        """String counter: the last team task number issued (ids `task_<n>`)."""
        return f"{self.base}:task_seq"

    # A team's ready tasks are also kept in lanes, one per kind of taker, so handing out a task
    # reads the head of the few lanes an idle teammate draws from, never every ready task.

    def ready_for(self, name: str) -> str:
        """Sorted set: the ready tasks reserved for one teammate (its assignee), by number."""
        return f"{self.base}:ready:for:{check_member_id(name)}"

    def ready_role(self, role: str) -> str:
        """Sorted set: the ready unreserved tasks of one role, by number. Roles match as the
        scripts compare them (Lua's string.lower: ASCII letters only, no other folding), and
        the role is free text, so the key holds a digest of it."""
        digest = hashlib.sha256(role.encode().lower()).hexdigest()[:16]
        return f"{self.base}:ready:role:{digest}"

    @property
    def ready_open(self) -> str:
        """Sorted set: the ready tasks that name neither an assignee nor a role, by number."""
        return f"{self.base}:ready:open"

    @property
    def reconciled(self) -> str:
        """String with TTL (heartbeat_ttl_s): set by the reconcile a worker runs after a turn,
        so the team's workers reconcile it at most once per TTL between them."""
        return f"{self.base}:reconciled"

    @property
    def lanes_indexed(self) -> str:
        """String: set once every task of the team has its ready lane (teams created before
        lanes existed are indexed on their first hand-out)."""
        return f"{self.base}:ready:indexed"


def model_cooldown(model: str, api_base: str | None) -> str:
    """String with TTL (fallback_cooldown_s): a model whose retries were just spent at this API
    base, which calls that have a fallback skip until it expires (every run and team alike: it
    is the provider that is down). A digest: model strings and URLs are free text."""
    digest = hashlib.sha256(f"{model}\0{api_base or ''}".encode()).hexdigest()[:32]
    return f"{PREFIX}:fallback:cooldown:{digest}"
