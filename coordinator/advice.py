"""Commands teamctl prints as advice, spelled so they work when pasted into the shell that printed
them: messages name commands as `teamctl VERB ...` in backticks, and what reaches a person is
spelled with the teamctl this shell finds (its path when PATH finds another, or none) and with
the `--redis-url` the command was given, its password never repeated: masked, with a word to
supply it, or left out where the commands reach that Redis without it (REDIS_URL, or the embedded
server's URL), so they still work pasted."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from teamctl.shared.redis.url_secrets import MASK, has_secret, redacted

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings

COMMAND = re.compile(r"`teamctl ([^`]*)`")
"""A command in a message: backticks, `teamctl`, the rest of the command line."""
ADVICE_KEY = "teamctl.advice"
"""Where a command's Advice lives in click's per-invocation `meta` (see `spelled`)."""
WITHOUT_REDIS_FLAG = ("workers stop", "redis ", "--version", "--help")
"""Verbs that take no --redis-url (they act on this host's state dir only)."""
SUPPLY_PASSWORD = f" (put back what your --redis-url holds where it shows {MASK})"
"""Said after advice whose --redis-url had its password masked."""


@dataclass(frozen=True)
class Advice:
    """How this shell reaches teamctl (`prog`) and the Redis the command was pointed at."""

    prog: str = "teamctl"
    redis_url: str | None = None
    """The --redis-url given on the command line, repeated in the commands it suggests (its
    password masked)."""
    reached_without_flag: bool = False
    """Whether the commands reach that Redis without --redis-url (see `reaches_by_default`):
    they leave it out then."""

    def spell(self, text: str) -> str:
        """`text` with every suggested command spelled for this shell."""
        url = None if self.reached_without_flag else self.redis_url
        if self.prog == "teamctl" and url is None:
            return text
        flagged: list[str] = []

        def command(rest: str) -> str:
            if url and not rest.startswith(WITHOUT_REDIS_FLAG):
                flagged.append(rest)
                return f"{self.prog} {rest} --redis-url {shlex.quote(redacted(url))}"
            return f"{self.prog} {rest}"

        spelled = COMMAND.sub(lambda match: f"`{command(match.group(1))}`", text)
        return spelled + SUPPLY_PASSWORD if flagged and url and has_secret(url) else spelled


def for_this_shell(redis_url: str | None = None, settings: Settings | None = None) -> Advice:
    """Advice for the shell that started this process (and the --redis-url it was given; with
    `settings`, left out of the commands when they reach that Redis without it)."""
    return Advice(
        teamctl_prog(),
        redis_url,
        redis_url is not None
        and settings is not None
        and has_secret(redis_url)
        and reaches_by_default(redis_url, settings),
    )


def reaches_by_default(redis_url: str, settings: Settings) -> bool:
    """Whether a command given no --redis-url uses `redis_url`: it is REDIS_URL, or REDIS_URL is
    unset and it is the embedded server's URL (its password is generated, so a person given
    only the masked URL could not supply it)."""
    if settings.redis_url is not None:
        return redis_url == settings.redis_url
    from teamctl.shared.redis.choice import embedded_redis

    try:
        return embedded_redis(settings).url_file.read_text().strip() == redis_url
    except OSError:  # no embedded server was ever started here
        return False


def teamctl_prog() -> str:
    """`teamctl` when PATH finds the teamctl beside this interpreter, else that script's path,
    else `python -m teamctl` with this interpreter."""
    beside = Path(sys.executable).parent / "teamctl"
    if not beside.exists():
        return f"{shlex.quote(sys.executable)} -m teamctl"
    found = shutil.which("teamctl")
    if found is not None and os.path.samefile(found, beside):
        return "teamctl"
    return shlex.quote(str(beside.absolute()))


def keep_for_this_command(advice: Advice) -> None:
    """Keep `advice` for the click command being run, so `spelled` finds it."""
    import click

    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[ADVICE_KEY] = advice


def current() -> Advice:
    """The Advice of the click command being run (for_this_shell() outside one)."""
    import click

    context = click.get_current_context(silent=True)
    advice = context.meta.get(ADVICE_KEY) if context is not None else None
    return advice or for_this_shell()


def spelled(text: str) -> str:
    """`text` with its suggested commands spelled for the shell that ran this command."""
    return current().spell(text)


def note(text: str) -> None:
    """One `teamctl: ...` line on stderr, its suggested commands spelled for this shell."""
    import click

    click.echo(f"teamctl: {spelled(text)}", err=True)
