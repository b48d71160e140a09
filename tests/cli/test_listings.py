"""Every listing prints one way: under a header row on a terminal, as tab-separated rows with no
header into a pipe (scripts split them on tabs), and its help names the columns it prints, in
order. A run, a file of its workspace, a registered worker and a team with a teammate, a task, a
request and mail are stored for them to list; no worker runs anything."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from rq import Worker
from rq.worker import WorkerStatus
from teamctl.coordinator.cli import main
from teamctl.shared.keys import RUNS_INDEX
from teamctl.shared.process.hosts import this_host
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore

from tests.support.cli import TEAMCTL, on_a_terminal, shown_at
from tests.support.runs import two_task_run

RUN = "r1"
COLUMNS = re.compile(r"columns: ([a-z]+(?:, [a-z]+)*)")
"""Where a listing's help names its columns, in the order it prints them."""


@dataclass
class Stored:
    """What the listings list, and where."""

    redis_url: str
    team: str
    worker: str
    """host:pid of the registered worker."""
    mail_ms: int
    """When alice's mail to the lead was sent."""
    request_id: str


@pytest.fixture
def stored(conn: redis.Redis, redis_url: str, team: str, tmp_path: Path) -> Iterator[Stored]:
    two_task_run(conn, RUN, tmp_path)
    conn.zadd(RUNS_INDEX, {RUN: 1})
    # Ended, so its duration stays put between two listings.
    assert CliRunner().invoke(main, ["cancel", RUN, "--redis-url", redis_url]).exit_code == 0
    (tmp_path / RUN / "notes.md").write_text("# Notes\n")
    store = TeamStore(conn, team)
    store.create(TeamOptions(max_tokens=1000))
    store.spawn(
        "alice",
        role="scout",
        prompt="Look around.",
        model="m",
        api_base=None,
        queue=f"nobody-{team}",
    )  # nobody serves it: alice stays working
    mail, _ = store.messages.send("alice", "lead", "a question\nin two lines")
    request, _ = store.requests.request_shutdown("alice", "wrapping up")
    TeamTasks(store).add("Plan the week", role="dev")
    worker = Worker(["members"], connection=redis.Redis.from_url(redis_url))
    worker.register_birth()
    worker.set_state(WorkerStatus.IDLE)
    try:
        yield Stored(
            redis_url, team, f"{worker.hostname}:{worker.pid}", mail.created_at, request.id
        )
    finally:
        worker.register_death()


def listing_verbs(stored: Stored) -> dict[str, list[str]]:
    """Each listing verb with its arguments."""
    team = ["-t", stored.team]
    return {
        "runs": ["runs"],
        "tasks": ["tasks", RUN],
        "files": ["files", RUN],
        "workers": ["workers"],
        "teams": ["teams"],
        "team list": ["team", "list", *team],
        "team inbox": ["team", "inbox", *team],
        "team requests": ["team", "requests", *team],
        "team task list": ["team", "task", "list", *team],
    }


def terminal(stored: Stored, args: list[str]) -> list[str]:
    """What `teamctl ARGS` shows on a terminal, as lines."""
    code, shown, stderr = on_a_terminal([*TEAMCTL, *args, "--redis-url", stored.redis_url], 60)
    assert code == 0, stderr
    return shown.splitlines()


def piped(stored: Stored, args: list[str]) -> list[str]:
    """What `teamctl ARGS` writes into a pipe, as lines."""
    result = CliRunner().invoke(main, [*args, "--redis-url", stored.redis_url])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def help_columns(args: list[str]) -> list[str]:
    """The columns the verb's --help names, in its order."""
    shown = CliRunner().invoke(main, [*args, "--help"])
    assert shown.exit_code == 0, shown.output
    named = COLUMNS.search(" ".join(shown.stdout.split()))
    assert named, f"teamctl {' '.join(args)} --help names no columns"
    return named.group(1).split(", ")


def header_cells(line: str) -> list[str]:
    return line.split()  # a header's names are single words, two spaces apart


def test_a_listing_has_a_header_on_a_terminal_and_none_in_a_pipe(stored: Stored) -> None:
    for verb, args in listing_verbs(stored).items():
        shown, rows = terminal(stored, args), piped(stored, args)
        assert header_cells(shown[0]) == help_columns(verb.split()), verb
        assert len(shown) == len(rows) + 1 and rows, (verb, shown, rows)
        for line, row in zip(shown[1:], rows, strict=True):  # the same cells, two ways
            assert row.split("\t") == re.split(r"  +", line, maxsplit=row.count("\t")), verb


def test_the_team_listings_print_these_rows(stored: Stored) -> None:
    team, sent = stored.team, shown_at(stored.mail_ms)
    assert terminal(stored, ["teams"]) == [
        "team" + " " * (len(team) - 2) + "teammates  working  tokens                cost      "
        "budget",
        f"{team}  1          1        0 tokens (max 1,000)  unpriced  -",
    ]
    assert piped(stored, ["teams"]) == [f"{team}\t1\t1\t0 tokens (max 1,000)\tunpriced\t-"]
    assert terminal(stored, ["team", "list", "-t", team]) == [
        "name   status   role   detail",
        "alice  working  scout  -",
    ]
    assert piped(stored, ["team", "list", "-t", team]) == ["alice\tworking\tscout\t-"]
    assert terminal(stored, ["team", "inbox", "-t", team]) == [
        "time" + " " * (len(sent) - 2) + "from   to    type          content",
        f"{sent}  alice  lead  peer.message  a question in two lines",
    ]
    assert piped(stored, ["team", "inbox", "-t", team]) == [
        f"{sent}\talice\tlead\tpeer.message\ta question in two lines"
    ]
    request = stored.request_id
    assert terminal(stored, ["team", "requests", "-t", team]) == [
        "request" + " " * (len(request) - 5) + "kind      from  to     status   detail",
        f"{request}  shutdown  lead  alice  pending  wrapping up",
    ]
    assert piped(stored, ["team", "requests", "-t", team]) == [
        f"{request}\tshutdown\tlead\talice\tpending\twrapping up"
    ]
    assert terminal(stored, ["team", "task", "list", "-t", team]) == [
        "task    status  owner  role  after  subject",
        "task_1  ready   -      dev   -      Plan the week",
    ]
    assert piped(stored, ["team", "task", "list", "-t", team]) == [
        "task_1\tready\t-\tdev\t-\tPlan the week"
    ]


def test_the_run_listings_print_these_rows(stored: Stored, tmp_path: Path) -> None:
    assert terminal(stored, ["tasks", RUN]) == [
        "task  status   member  attempts  detail",
        "a     blocked  -       0         cancelled",
        "b     blocked  -       0         cancelled",
    ]
    assert terminal(stored, ["files", RUN]) == ["bytes  version  path", "8      -        notes.md"]
    assert piped(stored, ["files", RUN]) == ["8\t-\tnotes.md"]
    files = CliRunner().invoke(main, ["files", RUN, "--redis-url", stored.redis_url])
    assert files.stderr == f"1 file in {tmp_path / RUN} on host {this_host()}\n"
    worker = stored.worker
    assert terminal(stored, ["workers"]) == [
        "queue    worker" + " " * (len(worker) - 4) + "state  job  pool",
        f"members  {worker}  idle   -    -",
    ]


def test_the_status_table_has_the_columns_its_help_names(stored: Stored) -> None:
    # status is a report, not a listing: its table keeps its header in a pipe too.
    status = CliRunner().invoke(main, ["status", RUN, "--redis-url", stored.redis_url])
    assert status.exit_code == 1, status.output  # a cancelled run
    [header] = [line for line in status.stdout.splitlines() if line.startswith("task ")]
    assert header_cells(header) == help_columns(["status"])


def test_the_send_verbs_say_whom_they_sent_to(stored: Stored) -> None:
    team = ["-t", stored.team]
    assert piped(stored, ["team", "send", "alice", "more", *team]) == ["sent to alice"]
    assert piped(stored, ["team", "broadcast", "all of you", *team]) == [
        "sent to 1 teammate; woke 0"
    ]
