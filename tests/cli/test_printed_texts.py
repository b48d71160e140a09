"""The texts every verb prints alike: tokens and cost, counts, times, and a message's lines."""

from __future__ import annotations

import json
import time

import pytest
from teamctl.coordinator.cli.messages_view import formatted
from teamctl.shared.agent.replies import Usage
from teamctl.shared.envelopes import PeerMessage
from teamctl.shared.text import clock_text, counted


@pytest.mark.parametrize(
    ("usage", "tokens", "cost"),
    [
        (Usage(), "0 tokens", "unpriced"),  # no call made, or every call failed: no figure
        (Usage(prompt_tokens=11, completion_tokens=7, unpriced=True), "18 tokens", "unpriced"),
        (
            Usage(prompt_tokens=2011, completion_tokens=444, cost_usd=0.0123),
            "2,455 tokens",
            "$0.0123",
        ),
        (Usage(prompt_tokens=1, cost_usd=0.0123, unpriced=True), "1 token", "$0.0123+"),
        (Usage(prompt_tokens=5), "5 tokens", "$0.0000"),  # a priced call that cost nothing
    ],
)
def test_tokens_and_cost_have_one_text_each(usage: Usage, tokens: str, cost: str) -> None:
    assert (usage.tokens_text(), usage.cost_text()) == (tokens, cost)


def local_ms(*when: int) -> int:
    """Epoch ms of a local date and time (year, month, day, hour, minute, second)."""
    return int(time.mktime((*when, 0, 0, -1)) * 1000)


def test_a_time_today_is_its_clock_and_another_days_has_its_date() -> None:
    at = local_ms(2031, 3, 9, 14, 3, 7)
    assert clock_text(at, local_ms(2031, 3, 9, 23, 59, 59)) == "14:03:07"
    assert clock_text(at, local_ms(2031, 3, 10, 0, 0, 1)) == "2031-03-09 14:03:07"


def test_a_message_starts_with_its_time_and_its_further_lines_are_indented() -> None:
    sent = local_ms(2031, 3, 9, 14, 3, 7)
    message = PeerMessage(
        id="1962389587000-0",
        from_="m1",
        to="m2",
        type="peer.message",
        task_id="a",
        content="## Findings\n\n\tfirst\x1b[31m\nlast\n",
        created_at=sent,
    )
    assert formatted(message, False, sent + 1000).splitlines() == [
        "14:03:07 [peer.message] (a) m1 -> m2: ## Findings",
        "",
        "        first",
        "    last",
    ]
    assert json.loads(formatted(message, True))["id"] == "1962389587000-0"  # --json keeps it


@pytest.mark.parametrize(
    ("count", "text"), [(0, "0 files"), (1, "1 file"), (2, "2 files"), (1200, "1,200 files")]
)
def test_a_count_agrees_with_its_noun(count: int, text: str) -> None:
    assert counted(count, "file") == text
