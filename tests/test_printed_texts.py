"""The texts every verb prints alike: tokens and cost, counts, times, and a message's lines."""

from __future__ import annotations

import pytest
from teamctl.shared.agent.replies import Usage


@pytest.mark.parametrize(("usage", "tokens", "cost"), [
    (Usage(), "0 tokens", "unpriced"),  # no call made, or every call failed: no figure
    (Usage(prompt_tokens=11, completion_tokens=7, unpriced=True), "18 tokens", "unpriced"),
    (Usage(prompt_tokens=2011, completion_tokens=444, cost_usd=0.0123), "2,455 tokens",
     "$0.0123"),
    (Usage(prompt_tokens=1, cost_usd=0.0123, unpriced=True), "1 token", "$0.0123+"),
    (Usage(prompt_tokens=5), "5 tokens", "$0.0000"),  # a priced call that cost nothing
])
def test_tokens_and_cost_have_one_text_each(usage: Usage, tokens: str, cost: str) -> None:
    assert (usage.tokens_text(), usage.cost_text()) == (tokens, cost)
