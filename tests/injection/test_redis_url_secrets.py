"""No line teamctl prints or logs holds a Redis password: `redacted()` masks any user info and any
query password, whatever they hold (a base64 password's `/`, `#`, `?`, `@`, `:`, `%`, spaces,
any character), in a URL that parses or not; connection errors quote the URL masked; advice
names `--redis-url` masked and says to supply the password, or leaves the flag out where the
command reaches that Redis without it (the embedded server's URL, REDIS_URL). The property tests
generate passwords and URL shapes; the end-to-end ones run real commands."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from teamctl.coordinator.advice import SUPPLY_PASSWORD, Advice, teamctl_prog
from teamctl.shared.errors import ConfigError, TeamError
from teamctl.shared.redis.connection import connect
from teamctl.shared.redis.embedded import EmbeddedRedis, throwaway_redis
from teamctl.shared.redis.url_secrets import MASK, redacted, shown_url

from tests.support.cli import TEAMCTL
from tests.support.runs import two_task_run

MARKER = "Zq7S3cr3t"
"""In every generated password: a line holding any middle part of the password holds it."""
DEAD = "127.0.0.1:9"
"""Where no Redis listens (the discard port): a connection is refused at once."""
AWKWARD = "Xk9/Qz+Rt8=#a?b@c:d%zz é"
"""A password holding every character that ends or splits a URL's parts, and more."""

awkward_text = st.text(
    st.sampled_from("/#?@:%&;= +é\u00a0\uff0f\uff03")
    | st.characters(codec="utf-8", exclude_categories=("Cs",)),
    max_size=12,
)
passwords = st.builds(lambda a, b: f"{a}{MARKER}{b}", awkward_text, awkward_text)


@st.composite
def urls_holding(draw: st.DrawFn, password: str) -> str:
    """A Redis URL shape with `password` in its user info, its query, or both; encoded or not;
    with a port that may not parse."""
    scheme = draw(st.sampled_from(["redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel"]))
    secret = draw(st.sampled_from([password, quote(password, safe="")]))
    where = draw(st.sampled_from(["user", "query", "both"]))
    user = draw(st.sampled_from(["", "default", "app"]))
    userinfo = draw(st.sampled_from([f"{user}:{secret}", secret])) + "@"
    if scheme == "unix":
        host = "/nonexistent/teamctl/redis.sock"
    else:
        port = draw(st.sampled_from(["9", "notaport", "99999", "9x"]))
        host = f"127.0.0.1:{port}"
        host += "/svc/0" if scheme.endswith("sentinel") else "/0"
    option = (
        "sentinel_password" if scheme.endswith("sentinel") and draw(st.booleans()) else "password"
    )
    query = draw(st.sampled_from(["?{o}={s}", "?db=0&{o}={s}", "?{o}={s}&socket_timeout=1"]))
    query = query.format(o=option, s=secret)
    return (
        f"{scheme}://{userinfo if where != 'query' else ''}{host}{query if where != 'user' else ''}"
    )


def holds(text: str, password: str) -> bool:
    """Whether `text` holds the password, encoded or not, or its middle."""
    return any(
        part in text for part in (MARKER, password, quote(password, safe=""), quote(password))
    )


@given(st.data(), passwords)
def test_redacted_never_holds_the_password_and_never_raises(
    data: st.DataObject, password: str
) -> None:
    url = data.draw(urls_holding(password))
    shown = redacted(url)
    assert not holds(shown, password), (url, shown)
    assert MASK in shown


@given(passwords, st.sampled_from(["api-key", "code", "sig", "key", "password"]))
def test_an_http_endpoint_is_shown_by_its_address_alone(secret: str, name: str) -> None:
    """An api_base or MCP url with a secret in its user info or any query parameter: the
    message shows scheme, host, port and path, and never the secret."""
    for url in (
        f"https://u:{quote(secret, safe='')}@models.example:8443/v1",
        f"https://models.example:8443/v1?{name}={quote(secret, safe='')}&user=a@b.example",
        f"https://{quote(secret, safe='')}@models.example:8443/v1#{quote(secret, safe='')}",
    ):
        assert shown_url(url) == "https://models.example:8443/v1", url
    assert shown_url(f"no-host/{secret}") == MASK


@given(st.data(), passwords)
def test_connect_errors_never_hold_the_password(data: st.DataObject, password: str) -> None:
    """Whatever the shape, nothing listens there: the error is a TeamError whose text is masked
    (a parser's error may quote the part of the URL that holds the password)."""
    url = data.draw(urls_holding(password))
    with pytest.raises(TeamError) as raised:
        connect(url).close()
    assert not holds(str(raised.value), password), (url, str(raised.value))
    assert raised.value.__cause__ is None or not holds(str(raised.value.__cause__), password)


@pytest.mark.parametrize("url", [f"unix://:][{MARKER}@/nonexistent/teamctl/redis.sock"])
def test_a_bracket_in_the_password_is_refused_before_a_parser_quotes_it(url: str) -> None:
    """Brackets read as an IPv6 host: the parser's error quoted the password's tail."""
    with pytest.raises(ConfigError) as raised:
        connect(url).close()
    assert MARKER not in str(raised.value)
    assert "percent-encode them" in str(raised.value)


@given(st.data(), passwords)
def test_advice_never_repeats_the_password_and_says_to_supply_it(
    data: st.DataObject, password: str
) -> None:
    url = data.draw(urls_holding(password))
    advice = Advice("teamctl", url).spell("run r stopped: `teamctl resume r` continues it")
    assert not holds(advice, password), (url, advice)
    assert advice.startswith("run r stopped: `teamctl resume r --redis-url ")
    assert advice.endswith(SUPPLY_PASSWORD)


@pytest.mark.parametrize(
    ("password", "says"),
    [
        (
            AWKWARD,
            f"invalid Redis URL 'redis://:{MASK}@{DEAD}/0': its user or password holds /, ?, "
            "#, [ or ], which a URL parser reads as part of the host; percent-encode them (/ "
            "as %2F, ? as %3F, # as %23, [ as %5B, ] as %5D, @ as %40, : as %3A, % as %25)",
        ),
        (quote(AWKWARD, safe=""), f"cannot reach Redis at redis://:{MASK}@{DEAD}/0: "),
        (
            "a\uff0fb:c",
            f"invalid Redis URL 'redis://:{MASK}@{DEAD}/0': netloc '{MASK}@{DEAD}' "
            "contains invalid characters under NFKC normalization",
        ),
    ],
)
def test_a_command_given_an_unreachable_url_prints_it_masked(password: str, says: str) -> None:
    url = f"redis://:{password}@{DEAD}/0"
    done = subprocess.run(
        [*TEAMCTL, "status", "r1", "--redis-url", url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode in (1, 2), done.stderr
    assert done.stdout == "" and done.stderr.startswith(f"teamctl: {says}"), done.stderr
    assert not holds(done.stderr, AWKWARD) and password not in done.stderr


def test_a_resume_hint_masks_the_password_and_works_once_it_is_supplied(
    tmp_path: Path, run_id: str
) -> None:
    with throwaway_redis() as open_url:
        redis.Redis.from_url(open_url).config_set("requirepass", AWKWARD)
        host_db = open_url.removeprefix("redis://")
        url = f"redis://:{quote(AWKWARD, safe='')}@{host_db}"
        two_task_run(redis.Redis.from_url(url, decode_responses=True), run_id, tmp_path)

        shown = subprocess.run(
            [*TEAMCTL, "status", run_id, "--redis-url", url],
            capture_output=True,
            text=True,
            timeout=60,
        )

        assert shown.returncode == 0, shown.stderr
        assert not holds(shown.stdout + shown.stderr, AWKWARD)
        masked = f"redis://:{MASK}@{host_db}"
        hint = shown.stdout.splitlines()[-1]
        assert hint == (
            f"no coordinator is driving it: `{teamctl_prog()} resume {run_id} "
            f"--redis-url {shlex.quote(masked)}` continues it{SUPPLY_PASSWORD}"
        )
        # Supplied where it shows ***, the hint's --redis-url reaches the run.
        given_url = shlex.split(hint.split("`")[1])[-1].replace(MASK, quote(AWKWARD, safe=""))
        again = subprocess.run(
            [*TEAMCTL, "status", run_id, "--redis-url", given_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[1:] == shown.stdout.splitlines()[1:]  # the same run


def test_a_hint_given_the_embedded_servers_url_leaves_the_flag_out(
    tmp_path: Path, run_id: str
) -> None:
    """Its password is generated: the hint works pasted as it is, without --redis-url."""
    server = EmbeddedRedis(tmp_path / "state" / "redis")  # the test's TEAMCTL_STATE_DIR
    url = server.ensure()
    password = redis.connection.parse_url(url)["password"]
    try:
        two_task_run(redis.Redis.from_url(url, decode_responses=True), run_id, tmp_path)

        shown = subprocess.run(
            [*TEAMCTL, "status", run_id, "--redis-url", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        pasted = subprocess.run(
            [*TEAMCTL, "status", run_id], capture_output=True, text=True, timeout=60
        )
    finally:
        server.stop()

    assert shown.returncode == 0, shown.stderr
    assert password not in shown.stdout + shown.stderr
    assert shown.stdout.splitlines()[-1] == (
        f"no coordinator is driving it: `{teamctl_prog()} resume {run_id}` continues it"
    )
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stdout.splitlines()[1:] == shown.stdout.splitlines()[1:]  # the same run
