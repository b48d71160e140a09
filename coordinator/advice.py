"""Commands teamctl prints as advice, spelled so they work when pasted into the shell that printed
them: messages name commands as `teamctl VERB ...` in backticks, and what reaches a person is
spelled with the teamctl this shell finds (its path when PATH finds another, or none) and with
the `--redis-url` the command was given."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

COMMAND = re.compile(r"`teamctl ([^`]*)`")
"""A command in a message: backticks, `teamctl`, the rest of the command line."""
ADVICE_KEY = "teamctl.advice"
"""Where a command's Advice lives in click's per-invocation `meta` (see `spelled`)."""
WITHOUT_REDIS_FLAG = ("workers stop", "redis ", "--version", "--help")
"""Verbs that take no --redis-url (they act on this host's state dir only)."""


@dataclass(frozen=True)
class Advice:
    """How this shell reaches teamctl (`prog`) and the Redis the command was pointed at."""

    prog: str = "teamctl"
    redis_url: str | None = None
    """The --redis-url given on the command line, repeated in the commands it suggests."""

    def spell(self, text: str) -> str:
        """`text` with every suggested command spelled for this shell."""
        if self.prog == "teamctl" and self.redis_url is None:
            return text
        return COMMAND.sub(lambda match: f"`{self._command(match.group(1))}`", text)

    def _command(self, rest: str) -> str:
        flag = (f" --redis-url {shlex.quote(self.redis_url)}"
                if self.redis_url and not rest.startswith(WITHOUT_REDIS_FLAG) else "")
        return f"{self.prog} {rest}{flag}"


def for_this_shell(redis_url: str | None = None) -> Advice:
    """Advice for the shell that started this process (and the --redis-url it was given)."""
    return Advice(teamctl_prog(), redis_url)


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
