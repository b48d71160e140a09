"""Prompt templates live in `prompts/` folders as Jinja files; a missing variable is an error.

All prompt text (section titles included) is in the templates; Python passes data only.
"""

from __future__ import annotations

import functools
from typing import Any

import jinja2
from teamctl.shared.text import shorten


@functools.cache  # compiling a template costs ~2 ms: once per process, not once per render
def _environment(package: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(package, "prompts"),
        undefined=jinja2.StrictUndefined,  # a missing variable is an error, never ""
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.filters["shorten"] = shorten
    return env


def render(package: str, template: str, /, **values: Any) -> str:
    """Render `<package>/prompts/<template>` with `values`; an undefined name raises."""
    return _environment(package).get_template(template).render(**values).strip("\n")


def precompile(package: str) -> None:
    """Compile every template of `package` now, e.g. in a preloading RQ worker parent, so its
    forked jobs inherit them compiled."""
    env = _environment(package)
    for name in env.list_templates(extensions=["md"]):
        env.get_template(name)
