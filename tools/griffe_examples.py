"""A Griffe extension for the docs site: "Example:" sections are read as doctest examples.

The project's docstrings name their runnable example section "Example:" (torch's habit);
Griffe's Google-style parser knows only "Examples:" and would render the singular as Markdown
text, where a doctest's output such as ``[[1.5]]`` reads as a reference link. Renaming the
heading before parsing renders every example as code, without touching the docstrings.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is not None and "Example:" in doc.value:
            doc.value = _HEADING.sub(r"\1Examples:", doc.value)
