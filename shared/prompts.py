"""Prompt templates live in `prompts/` folders as files; rendering fails on a missing variable."""

from __future__ import annotations

from importlib import resources
from string import Template


def render(package: str, template: str, /, **values: str) -> str:
    """Render `<package>/prompts/<template>`; a `$var` with no value raises KeyError."""
    folder = resources.files(package).joinpath("prompts")
    text = folder.joinpath(template).read_text(encoding="utf-8")
    return Template(text).substitute(values).strip("\n")
