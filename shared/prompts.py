"""Prompt templates live in `prompts/` folders as Jinja files; a missing variable is an error.

All prompt text (section titles included) is in the templates; Python passes data only.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import jinja2

from shared.text import shorten


def _environment(package: str) -> jinja2.Environment:
    folder = resources.files(package).joinpath("prompts")
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: folder.joinpath(name).read_text(encoding="utf-8")),
        undefined=jinja2.StrictUndefined,  # a missing variable is an error, never ""
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)
    env.filters["shorten"] = shorten
    return env


def render(package: str, template: str, /, **values: Any) -> str:
    """Render `<package>/prompts/<template>` with `values`; an undefined name raises."""
    return _environment(package).get_template(template).render(**values).strip("\n")
