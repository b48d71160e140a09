"""Team tools across real workers: a full `teamctl run` on the session's rq workers."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from teamctl.coordinator.cli import main

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import parsed, tool_names, tool_results
from tests.support.teamfile import team_file

PLAN = {
    "tasks": [
        {"id": "task_1", "memberId": "m1", "task": "Collect notes"},
        {"id": "task_2", "memberId": "m2", "task": "Write the summary", "dependsOn": ["task_1"]},
    ]
}


def test_members_message_each_other_and_see_dependency_outputs(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    m1 = llm.script(
        f"m1-{run_id}",
        [
            ToolCalls(
                [
                    (
                        "team_send_message",
                        {
                            "toMemberId": "m2",
                            "type": "peer.ask",
                            "taskId": "task_1",
                            "content": "Please share your notes",
                        },
                    ),
                    ("team_broadcast", {"type": "peer.broadcast", "content": "task_1 is running"}),
                    ("team_heartbeat_task", {"taskId": "task_1"}),
                    ("team_list_tasks", {}),
                ]
            ),
            "m1 finished",
        ],
    )
    m2 = llm.script(f"m2-{run_id}", [ToolCalls([("team_read_messages", {})]), "m2 done"])
    team = team_file(
        tmp_path / "team.toml",
        {
            "planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)]),
            "synth": llm.script(f"synth-{run_id}", ["team final"]),
        },
        team_id="tools",
        members=[{"id": "m1", "model": m1}, {"id": "m2", "model": m2}],
    )

    result = CliRunner().invoke(
        main,
        [
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
        ],
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["output"] == "team final"
    assert {s["task_id"]: s["status"] for s in out["task_states"]} == {
        "task_1": "completed",
        "task_2": "completed",
    }
    assert out["task_states"][0]["heartbeat_count"] == 1
    # m1's first request declares the team tools; every result starts action, ok, memberId.
    m1_first, m1_second = llm.requests[f"m1-{run_id}"]
    assert [n for n in tool_names(m1_first) if n.startswith("team_")] == [
        "team_send_message",
        "team_broadcast",
        "team_read_messages",
        "team_list_tasks",
        "team_claim_task",
        "team_release_task",
        "team_reassign_task",
        "team_heartbeat_task",
    ]
    results = [parsed(r) for r in tool_results(m1_second)]
    assert [(r["action"], r["ok"], r["memberId"]) for r in results] == [
        ("team_send_message", True, "m1"),
        ("team_broadcast", True, "m1"),
        ("team_heartbeat_task", True, "m1"),
        ("team_list_tasks", True, "m1"),
    ]
    assert results[0]["toMemberId"] == "m2" and results[1]["taskId"] == "task_1"
    assert [t["taskId"] for t in results[3]["tasks"]] == ["task_1", "task_2"]
    # m2 reads m1's direct message and broadcast, then its own task.assigned, each once.
    (read,) = tool_results(llm.requests[f"m2-{run_id}"][1])
    read = parsed(read)
    assert (read["ok"], read["count"], read["hasNewMessages"]) == (True, 3, True)
    assert read["messages"] == [
        {
            "from": "m1",
            "to": "m2",
            "type": "peer.ask",
            "taskId": "task_1",
            "content": "Please share your notes",
        },
        {
            "from": "m1",
            "to": "*",
            "type": "peer.broadcast",
            "taskId": "task_1",
            "content": "task_1 is running",
        },
        {
            "from": "system",
            "to": "m2",
            "type": "task.assigned",
            "taskId": "task_2",
            "content": "Write the summary",
        },
    ]
    # m2's dispatch input holds m1's output and the recent messages.
    m2_prompt = llm.prompts(f"m2-{run_id}")[0]
    assert "- task_1 (completed): m1 finished" in m2_prompt
    assert "- [peer.ask] m1 -> m2: Please share your notes" in m2_prompt
    peer = [
        (m["from"], m["to"], m["type"], m["content"])
        for m in out["messages"]
        if m["type"].startswith("peer.")
    ]
    assert peer == [
        ("m1", "m2", "peer.ask", "Please share your notes"),
        ("m1", "*", "peer.broadcast", "task_1 is running"),
    ]
    assert out["usage"]["prompt_tokens"] == 11 * 6  # plan, 2 + 2 member calls, synthesis
