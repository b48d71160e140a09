"""The injection suite's own check: the marked workers hold the marker, and the leak check finds
it wherever it is put (a check that cannot fail would prove nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.support.injection import MARKER, assert_marker_kept, files_holding, redis_text
from tests.support.llm import ScriptedLLM


def test_the_leak_check_finds_the_marker_in_redis_files_and_requests(
    conn: redis.Redis, tmp_path: Path, llm: ScriptedLLM
) -> None:
    assert_marker_kept(llm, conn, [tmp_path])
    conn.xadd("some:stream", {"body": f"x{MARKER}y"})
    with pytest.raises(AssertionError, match="Redis holds the marker"):
        assert_marker_kept(llm, conn, [tmp_path])
    conn.flushdb()
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "f.log").write_text(f"token={MARKER}\n")
    assert files_holding(MARKER, [tmp_path]) == [tmp_path / "deep" / "er" / "f.log"]
    assert "some:stream" not in redis_text(conn)
