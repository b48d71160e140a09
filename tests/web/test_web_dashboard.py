"""`teamctl dashboard` over HTTP against real uvicorn and a real Redis: the pages, the event
stream and its resume with Last-Event-ID, the control endpoints and their token."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import markupsafe
import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.agent.replies import Usage
from teamctl.shared.budget import Budget
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunEnd, RunStore

from tests.support.web import (
    HOSTILE,
    TOKEN,
    chain,
    dashboard_command,
    finish_run,
    finished_run,
    reclaim_first_attempt,
    served,
    signed_in,
    start_run,
)


@pytest.fixture
def dashboard(redis_url: str) -> Iterator[httpx.Client]:
    """A read-only dashboard, and a client signed in through its printed URL."""
    with served(redis_url) as base, signed_in(base) as client:
        yield client


@pytest.fixture
def controlled(redis_url: str) -> Iterator[httpx.Client]:
    """A dashboard with control on, and a client signed in through its printed URL (the
    cookie opens reads; each control still needs the token)."""
    with served(redis_url, allow_control=True) as base, signed_in(base) as client:
        yield client


def frames(
    client: httpx.Client, path: str, headers: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """The SSE frames of a stream that ends (a finished run's), each as its fields."""
    found: list[dict[str, str]] = []
    current: dict[str, str] = {}
    with client.stream("GET", path, headers=headers or {}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if "event" in current:  # not the `retry:` hint, nor a keep-alive comment
                    found.append(current)
                current = {}
                continue
            name, _, value = line.partition(": ")
            if name:
                current[name] = value
    return found


def test_the_runs_page_lists_a_finished_run(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    finished_run(conn, run_id)
    page = dashboard.get("/")
    assert page.status_code == 200
    assert f'data-run="{run_id}"' in page.text and "completed 2" in page.text
    assert "<script>alert" not in page.text  # the objective, escaped
    assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_the_run_page_escapes_what_models_wrote(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    finished_run(conn, run_id)
    page = dashboard.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert HOSTILE not in page.text
    assert page.text.count(str(markupsafe.escape(HOSTILE))) >= 3
    assert page.text.count('class="bar o-') == 3
    assert page.text.count("<script") == 1  # the page's own /static/app.js, nothing else
    link = f'href="/runs/{run_id}/tasks/a/transcript"'
    assert link in page.text and "the facts" not in page.text  # on a page of its own
    transcript = dashboard.get(f"/runs/{run_id}/tasks/a/transcript")
    assert transcript.status_code == 200 and HOSTILE not in transcript.text
    assert f"the facts {markupsafe.escape(HOSTILE)}" in transcript.text
    assert dashboard.get(f"/runs/{run_id}/tasks/zz/transcript").status_code == 404
    filtered = dashboard.get(f"/runs/{run_id}?member=m1&type=task.result")
    assert "peer.message" not in filtered.text.split('id="bus"')[1].split("</table>")[0]


def test_the_run_page_says_tokens_and_cost_as_the_cli_does(
    conn: redis.Redis, redis_url: str, run_id: str, dashboard: httpx.Client
) -> None:
    """One text for tokens and one for cost, on the page and in `teamctl status` alike: task
    `a` made a priced call, `b` none (no figure: `unpriced`, not $0.0000)."""
    run = start_run(conn, run_id)
    budget = Budget(conn, RunKeys(run_id), max_tokens=None, max_cost_usd=None)
    budget.charge(Usage(prompt_tokens=2011, completion_tokens=444, cost_usd=0.0123), "a")
    finish_run(conn, run, reclaim_first_attempt(conn, run))
    page = dashboard.get(f"/runs/{run_id}").text
    # The run's row, then task a's; task b's.
    assert page.count("<th>tokens</th><td>2,455 tokens</td><th>cost</th><td>$0.0123</td>") == 2
    assert page.count("<th>tokens</th><td>0 tokens</td><th>cost</th><td>unpriced</td>") == 1

    status = CliRunner().invoke(main, ["status", run_id, "--redis-url", redis_url])
    assert status.exit_code == 0, status.output
    lines = status.stdout.splitlines()
    assert re.fullmatch(
        rf"{run_id}: completed; rounds 0; \d+\.\ds; 2,455 tokens, \$0\.0123", lines[0]
    ), lines[0]
    assert lines[2:5] == [
        "task  member  status     attempts  time  cost                   error",
        "a     m1      completed  2         0.0s  2,455 tokens, $0.0123",
        "b     m2      completed  1         0.0s  0 tokens, unpriced",
    ]


def test_a_chain_of_ten_thousand_tasks_listed_dependents_first_renders(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    """The whole graph, drawn without recursion; the details of the tasks that matter now
    (the one ready, then those changed last), not of ten thousand, which a browser would take
    many seconds to build after every change."""
    from teamctl.coordinator.web.run_page_data import TASKS_DETAILED

    start_run(conn, run_id, tasks=chain(10_000))
    for path in (f"/runs/{run_id}", f"/runs/{run_id}/body"):
        page = dashboard.get(path, timeout=120)
        assert page.status_code == 200
        svg = page.text.split('<svg class="dag"')[1].split("</svg>")[0]
        assert svg.count('<g class="node ') == 10_000
        assert page.text.count('<section class="task"') == TASKS_DETAILED
        assert 'id="task-c1"' in page.text  # ready: shown before those still pending
        assert f"The details of {TASKS_DETAILED} of the 10000 tasks" in page.text


def test_a_bad_or_unknown_run_id_is_a_one_line_404(dashboard: httpx.Client) -> None:
    unknown = dashboard.get("/runs/nosuchrun")
    assert unknown.status_code == 404 and "teamctl runs" in unknown.text
    bad = dashboard.get("/runs/..%2F..")
    assert bad.status_code == 404


def test_the_static_files_come_from_the_package(dashboard: httpx.Client) -> None:
    script = dashboard.get("/static/app.js")
    assert "EventSource" in script.text
    # Every answer carries the policy, static files and errors too: no framing, no other origin.
    for answer in (script, dashboard.get("/runs/nope")):
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert "svg.dag" in dashboard.get("/static/style.css").text


def test_the_stream_resumes_after_last_event_id(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    finished_run(conn, run_id)
    whole = frames(dashboard, f"/runs/{run_id}/stream")
    kinds = [
        (f["event"], json.loads(f["data"]).get("status") or json.loads(f["data"]).get("type"))
        for f in whole
    ]
    # The plan's writing is a change of the run as a whole (its graph), then the tasks move.
    assert kinds[:2] == [("state", None), ("task", "in_progress")]
    assert kinds[-1] == ("end", None)
    assert ("message", "peer.message") in kinds
    claims = [
        json.loads(f["data"])
        for f in whole
        if f["event"] == "task" and json.loads(f["data"])["status"] == "in_progress"
    ]
    assert [c["worker"] for c in claims] == ["hostA:101", "hostB:202", "hostB:202"]
    # Reconnect as a browser would, from the third event: exactly the rest comes again.
    resumed = frames(dashboard, f"/runs/{run_id}/stream", headers={"Last-Event-ID": whole[2]["id"]})
    assert resumed == whole[3:]
    # A Last-Event-ID that is not a cursor is ignored (the stream starts over), never sent on.
    assert (
        frames(dashboard, f"/runs/{run_id}/stream", headers={"Last-Event-ID": "0-0/$ FLUSHALL"})
        == whole
    )


def test_control_is_absent_unless_allowed(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    start_run(conn, run_id)
    response = dashboard.post(f"/runs/{run_id}/cancel", data={"token": TOKEN})
    assert response.status_code in (404, 405)
    assert not RunStore(conn, RunKeys(run_id)).cancelled()


def test_control_refuses_without_the_token_and_works_with_it(
    conn: redis.Redis, run_id: str, controlled: httpx.Client
) -> None:
    start_run(conn, run_id)
    send = f"/runs/{run_id}/send"
    for token in (None, "", "wrong", TOKEN[:-1]):
        data = {"to": "m1", "text": "hello"} | ({"token": token} if token is not None else {})
        assert controlled.post(send, data=data).status_code == 403
    assert controlled.get(send).status_code == 405  # POST only
    assert MessageBus(conn, RunKeys(run_id)).messages() == []

    sent = controlled.post(send, data={"to": "m1", "text": "hello", "token": TOKEN})
    assert sent.status_code == 303
    [message] = MessageBus(conn, RunKeys(run_id)).messages()
    assert (message.from_, message.to, message.content) == ("lead", "m1", "hello")
    by_header = controlled.post(
        send, data={"to": "nobody", "text": "x"}, headers={"X-Teamctl-Token": TOKEN}
    )
    assert by_header.status_code == 409 and "nobody" in by_header.text  # the CLI's own error

    cancel = controlled.post(f"/runs/{run_id}/cancel", data={"token": TOKEN})
    assert cancel.status_code == 303
    assert RunStore(conn, RunKeys(run_id)).cancelled()


def test_a_paused_run_offers_to_add_budget_and_the_control_needs_the_token(
    conn: redis.Redis, run_id: str, controlled: httpx.Client
) -> None:
    run = start_run(conn, run_id, max_cost_usd=0.5)
    run.store.set_status(RunStatus.AWAITING_BUDGET)
    budget = Budget(conn, RunKeys(run_id), max_tokens=None, max_cost_usd=0.5)
    budget.mark_spent("budget exceeded: $0.5 spent, max_cost_usd is 0.5")
    page = controlled.get(f"/runs/{run_id}").text
    assert "awaiting_budget" in page and "paused: the run's budget is spent" in page
    assert f'action="/runs/{run_id}/budget"' in page and 'name="add_usd"' in page
    assert 'name="add_tokens"' not in page  # no token limit to add to
    add = f"/runs/{run_id}/budget"
    assert controlled.post(add, data={"add_usd": "2"}).status_code == 403
    assert controlled.post(add, data={"add_usd": "2", "token": "nope"}).status_code == 403
    for bad, says in (
        ({"add_usd": "-2"}, "--add-usd '-2'"),
        ({}, "give add_usd or add_tokens"),
        ({"add_tokens": "100"}, "has no max_tokens"),
    ):
        refused = controlled.post(add, data=bad | {"token": TOKEN})
        assert refused.status_code == 409 and says in refused.text, refused.text
    assert budget.state().added_usd == 0 and budget.exceeded()

    added = controlled.post(add, data={"add_usd": "2", "token": TOKEN})

    assert added.status_code == 303 and added.headers["location"].endswith("note=budget-raised")
    state = budget.state()
    assert (state.added_usd, state.exceeded) == (2.0, None)
    woken = conn.xrevrange(RunKeys(run_id).events, count=1)[0][1]
    assert woken["status"] == "run.budget"  # the coordinator is woken to resume


def test_dashboard_without_the_web_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    import sys

    # As if not installed: every starlette module this process imported is hidden too.
    for name in [m for m in sys.modules if m.split(".")[0] in ("starlette", "uvicorn")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "starlette", None)
    monkeypatch.delitem(sys.modules, "teamctl.coordinator.web.serve", raising=False)
    monkeypatch.delitem(sys.modules, "teamctl.coordinator.web.app", raising=False)
    result = CliRunner().invoke(main, ["dashboard", "--port", "0", "--redis-url", redis_url])
    assert result.exit_code == 2
    assert result.stderr.strip() == "pip install 'teamctl[web]'"


def test_the_team_page_shows_roster_inboxes_requests_and_tasks(
    conn: redis.Redis, dashboard: httpx.Client
) -> None:
    from teamctl.shared.bus import LEAD
    from teamctl.shared.teams.tasks import TeamTasks
    from teamctl.shared.teams.team_store import TeamStore

    store = TeamStore(conn, "webteam")
    # Its turns wait on a queue no worker serves: the page shows the records as they stand.
    store.spawn(
        "alice",
        role="researcher",
        prompt="Research",
        model="m",
        api_base=None,
        queue="web-nobody",
        plan_mode=True,
    )
    store.requests.submit_plan("alice", f"plan {HOSTILE}")
    store.messages.send("alice", LEAD, f"note {HOSTILE}")
    task_id = TeamTasks(store).add("Collect facts")[0].task_id
    teams = dashboard.get("/teams")
    assert teams.status_code == 200 and 'href="/teams/webteam"' in teams.text
    page = dashboard.get("/teams/webteam")
    assert page.status_code == 200
    assert 'data-mate="alice"' in page.text and "researcher" in page.text
    assert f"Lead's inbox ({store.messages.unread_count(LEAD)} unread)" in page.text
    assert store.messages.unread_count(LEAD) >= 1
    assert f"note {markupsafe.escape(HOSTILE)}" in page.text
    requests = page.text.split('id="requests"')[1].split("</table>")[0]
    assert "plan" in requests and str(markupsafe.escape(HOSTILE)) in requests
    assert task_id in page.text and "Collect facts" in page.text
    assert HOSTILE not in page.text
    assert dashboard.get("/teams/NoSuch!").status_code == 404


def test_the_dashboard_command_prints_a_url_that_carries_its_token(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    """`teamctl dashboard --allow-control` in its own process: nothing answers without the
    token; the URL it prints signs a client in (its cookie opens reads, not control); the
    control token it prints is the same token, and control needs it typed."""
    start_run(conn, run_id)
    with dashboard_command(redis_url, "--allow-control") as printed:
        assert printed.url.startswith(f"{printed.base}/?token=")
        token = printed.url.split("?token=")[1]
        assert printed.control_token == token and len(token) >= 32
        refused = httpx.get(printed.base + "/", timeout=10)
        assert refused.status_code == 401 and "printed" in refused.text
        with httpx.Client(timeout=10, follow_redirects=True) as browser:
            page = browser.get(printed.url)
            assert page.status_code == 200 and f'data-run="{run_id}"' in page.text
            assert str(page.url) == printed.base + "/"  # the token is out of the address
            cancel = f"{printed.base}/runs/{run_id}/cancel"
            assert browser.post(cancel).status_code == 403
            assert browser.post(cancel, data={"token": "x"}).status_code == 403
            assert not RunStore(conn, RunKeys(run_id)).cancelled()
            assert browser.post(cancel, data={"token": token}).status_code == 200  # 303, then
            assert RunStore(conn, RunKeys(run_id)).cancelled()  # the page


def test_the_dashboard_command_with_no_auth_prints_no_token_and_opens_reads(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    finished_run(conn, run_id)
    with dashboard_command(redis_url, "--no-auth") as printed:
        assert printed.url == printed.base + "/" and printed.control_token is None
        assert httpx.get(f"{printed.base}/runs/{run_id}", timeout=10).status_code == 200


def test_every_read_needs_the_token(conn: redis.Redis, redis_url: str, run_id: str) -> None:
    """Pages, bodies, streams, transcripts and static files: 401 with the line that says where
    the token is, without it or with a wrong one; answered with the printed URL's cookie or
    the token in the header."""
    finished_run(conn, run_id)
    paths = [
        "/",
        "/runs-body",
        f"/runs-stream?runs={run_id}",
        f"/runs/{run_id}",
        f"/runs/{run_id}/body",
        f"/runs/{run_id}/stream",
        f"/runs/{run_id}/tasks/a/transcript",
        "/teams",
        "/static/app.js",
        "/static/style.css",
        "/runs/nosuchrun",
        "/no-such-route",
    ]
    with (
        served(redis_url) as base,
        signed_in(base) as client,
        httpx.Client(base_url=base, timeout=10) as stranger,
    ):
        for path in paths:
            for headers in (
                {},
                {"X-Teamctl-Token": "wrong"},
                {"Cookie": "teamctl_dashboard=" + TOKEN},
            ):
                refused = stranger.get(path, headers=headers)
                assert refused.status_code == 401, path
                assert "open the URL `teamctl dashboard` printed" in refused.text
                assert "<script" not in refused.text and run_id not in refused.text
            assert stranger.get(path, params={"token": "wrong"}).status_code == 401
            expected = 404 if path in ("/runs/nosuchrun", "/no-such-route") else 200
            with client.stream("GET", path) as answer:  # a live stream: its status alone
                assert answer.status_code == expected, path
            with stranger.stream("GET", path, headers={"X-Teamctl-Token": TOKEN}) as answer:
                assert answer.status_code == expected, path


def test_the_printed_url_sets_a_private_cookie_and_leaves_the_address(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    finished_run(conn, run_id)
    with served(redis_url) as base, httpx.Client(base_url=base, timeout=10) as browser:
        answer = browser.get(f"/runs/{run_id}", params={"member": "m1", "token": TOKEN})
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/runs/{run_id}?member=m1"
        assert answer.headers["cache-control"] == "no-store"
        [cookie] = answer.headers.get_list("set-cookie")
        name, _, rest = cookie.partition("=")
        value, *attributes = rest.split("; ")
        assert set(attributes) == {"Path=/", "HttpOnly", "SameSite=Strict"}
        assert TOKEN not in cookie and len(value) >= 32  # a secret of its own, never printed
        assert browser.get(f"/runs/{run_id}?member=m1").status_code == 200
        with httpx.Client(base_url=base, timeout=10, cookies={name: value + "x"}) as forged:
            assert forged.get("/").status_code == 401


def test_no_auth_opens_reads_but_never_control(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    finished_run(conn, run_id)
    live = start_run(conn, run_id + "-live")
    with (
        served(redis_url, allow_control=True, open_reads=True) as base,
        httpx.Client(base_url=base, timeout=10) as anyone,
    ):
        for path in (
            "/",
            f"/runs/{run_id}",
            f"/runs/{run_id}/tasks/a/transcript",
            "/static/app.js",
        ):
            assert anyone.get(path).status_code == 200, path
        assert len(frames(anyone, f"/runs/{run_id}/stream")) > 3
        cancel = f"/runs/{live.run_id}/cancel"
        for data in ({}, {"token": "wrong"}):
            assert anyone.post(cancel, data=data).status_code == 403
        assert not RunStore(conn, RunKeys(live.run_id)).cancelled()
        assert anyone.post(cancel, data={"token": TOKEN}).status_code == 303
        assert RunStore(conn, RunKeys(live.run_id)).cancelled()


def test_the_runs_page_streams_the_changes_of_its_live_runs(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    """The runs page follows the runs it listed live from where it read them: a claim made
    after the page was rendered comes over its stream, nothing from before it."""
    import html as html_lib
    import re

    run = start_run(conn, run_id)
    page = dashboard.get("/").text
    stream_path = html_lib.unescape(re.search(r'data-stream="([^"]+)"', page).group(1))
    assert run_id in stream_path
    assert run.board.claim("a", "m1", "hostA:101", 30) is not None
    with dashboard.stream("GET", stream_path) as response:
        lines = response.iter_lines()
        data = next(line for line in lines if line.startswith("data: "))
    change = json.loads(data.removeprefix("data: "))
    assert (change["owner"], change["task_id"], change["status"], change["worker"]) == (
        run_id,
        "a",
        "in_progress",
        "hostA:101",
    )


def test_the_runs_page_hears_of_a_run_started_after_it_loaded(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    """With no live run the page still follows the runs-started stream: a run created after
    the page was rendered is announced on it (the page then loads again to follow it)."""
    import html as html_lib
    import re

    page = dashboard.get("/").text
    stream_path = html_lib.unescape(re.search(r'data-stream="([^"]+)"', page).group(1))
    start_run(conn, run_id)
    with dashboard.stream("GET", stream_path) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        event = next(line for line in lines if line.startswith("event: "))
        data = next(line for line in lines if line.startswith("data: "))
    assert event == "event: run"
    assert json.loads(data.removeprefix("data: "))["owner"] == run_id
    again = dashboard.get("/").text
    assert run_id in html_lib.unescape(re.search(r'data-stream="([^"]+)"', again).group(1))


def test_the_runs_page_hears_a_live_run_end(
    conn: redis.Redis, run_id: str, dashboard: httpx.Client
) -> None:
    """A run's end is a change of its row (status, duration, cost): the runs page's stream says
    so, and the row shows it on reload."""
    import html as html_lib
    import re

    run = start_run(conn, run_id)
    page = dashboard.get("/").text
    stream_path = html_lib.unescape(re.search(r'data-stream="([^"]+)"', page).group(1))
    run.store.finish(RunEnd(RunStatus.COMPLETED, 3600, output="done"))
    with dashboard.stream("GET", stream_path) as response:
        lines = response.iter_lines()
        event = next(line for line in lines if line.startswith("event: "))
        data = next(line for line in lines if line.startswith("data: "))
    assert (event, json.loads(data.removeprefix("data: "))["owner"]) == ("event: state", run_id)
    assert "s-completed" in dashboard.get("/runs-body").text


def test_team_control_sends_and_reviews_plans_only_with_the_token(
    conn: redis.Redis, controlled: httpx.Client
) -> None:
    from teamctl.shared.bus import LEAD
    from teamctl.shared.teams.team_store import TeamStore
    from teamctl.shared.teams.teammates import RequestStatus

    store = TeamStore(conn, "steered")
    store.spawn(
        "alice",
        role="writer",
        prompt="Write",
        model="m",
        api_base=None,
        queue="web-nobody",
        plan_mode=True,
    )
    request = store.requests.submit_plan("alice", "my plan")
    page = controlled.get("/teams/steered").text
    assert f'name="request_id" value="{request.id}"' in page
    review = "/teams/steered/review"
    decision = {"request_id": request.id, "decision": "approve"}
    assert controlled.post(review, data=decision).status_code == 403
    assert controlled.post(review, data=decision | {"token": "nope"}).status_code == 403
    assert store.requests.get(request.id).status is RequestStatus.PENDING
    assert controlled.post(review, data=decision | {"token": TOKEN}).status_code == 303
    assert store.requests.get(request.id).status is RequestStatus.APPROVED
    again = controlled.post(review, data=decision | {"token": TOKEN})
    assert again.status_code == 409  # the store's own refusal, one line

    send = "/teams/steered/send"
    assert controlled.post(send, data={"to": "alice", "text": "hi"}).status_code == 403
    assert (
        controlled.post(send, data={"to": "alice", "text": "hi", "token": TOKEN}).status_code == 303
    )
    sent = [m for m in store.bus.messages() if m.from_ == LEAD and m.content == "hi"]
    assert [m.to for m in sent] == ["alice"]


def test_team_control_adds_to_a_spent_team_budget_only_with_the_token(
    conn: redis.Redis, controlled: httpx.Client
) -> None:
    from teamctl.shared.agent.replies import Usage
    from teamctl.shared.teams.options import TeamOptions
    from teamctl.shared.teams.team_store import TeamStore

    store = TeamStore(conn, "spent")
    store.create(TeamOptions(max_tokens=30))
    assert store.charge(Usage(prompt_tokens=40)).exceeded
    page = controlled.get("/teams/spent").text
    assert "budget spent: teammates take no turn until it is raised" in page
    assert 'action="/teams/spent/budget"' in page and 'name="add_usd"' not in page
    add = "/teams/spent/budget"
    assert controlled.post(add, data={"add_tokens": "100"}).status_code == 403
    assert controlled.post(add, data={"add_tokens": "x", "token": TOKEN}).status_code == 409

    added = controlled.post(add, data={"add_tokens": "100", "token": TOKEN})

    assert added.status_code == 303
    assert (store.budget.state().added_tokens, store.budget_exceeded()) == (100, None)


def test_on_loopback_only_loopback_host_names_are_answered(dashboard: httpx.Client) -> None:
    """A page of another site re-pointed at 127.0.0.1 (DNS rebinding) sends its own name as
    Host: refused, so a browser cannot hand it the pages."""
    assert dashboard.get("/", headers={"Host": "evil.example"}).status_code == 400
    port = dashboard.base_url.port
    assert dashboard.get("/", headers={"Host": f"localhost:{port}"}).status_code == 200


def test_a_port_in_use_is_a_one_line_usage_error(redis_url: str) -> None:
    import socket

    from tests.support.cli import assert_config_error

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main, ["dashboard", "--port", str(port), "--redis-url", redis_url]
        )
    assert_config_error(result, f"cannot listen on 127.0.0.1:{port}")
