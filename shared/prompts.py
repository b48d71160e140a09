"""Prompt templates live in `prompts/` folders as files; rendering fails on a missing variable."""

from __future__ import annotations

from importlib import resources
from string import Template


def render(package: str, template: str, /, **values: str) -> str:
    """Render `<package>/prompts/<template>` with `$var` placeholders; a missing one raises KeyError."""
    text = resources.files(package).joinpath("prompts").joinpath(template).read_text(encoding="utf-8")
    return Template(text).substitute(values).strip("\n")
