"""Answer formats: how a model's answer is shaped, validated and rendered. A registry of entry points.

* ``table`` -- every row of the table (:mod:`.table`);
* ``edits`` -- changes to the current table as boxes of bins (:mod:`.edits`);
* ``rules`` -- a decision list and linear rules compiled into the table (:mod:`.rules`; the rule language and its
  compiler: :mod:`.ruleset`);
* ``decisions`` -- a decision list ``if <bins> then <entry>``, first match wins, and a default (:mod:`.decisions`);
* ``action`` -- one ``Action: N`` line, the direct mode's answer (:mod:`.action`).

A new format is one file implementing :class:`~llm_policy_gen.formats.base.AnswerFormat` plus one
``FORMATS.register(name, entry_point="module:Class")`` line.
"""

from __future__ import annotations

from typing import Any

from ..registry import Registry
from .base import AnswerFormat

__all__ = ["FORMATS", "make_format", "AUTO_EDITS_ABOVE", "resolve_format_name", "table_format_names",
           "refinable_format_names"]

FORMATS: Registry[type[AnswerFormat[Any]]] = Registry("answer format", "--output-format")
FORMATS.register("table", "llm_policy_gen.formats.table:TableFormat", description="every row of the table")
FORMATS.register("edits", "llm_policy_gen.formats.edits:EditsFormat",
                 description="changes to the current table as boxes of bins")
FORMATS.register("rules", "llm_policy_gen.formats.rules:RulesFormat",
                 description="a decision list and linear rules that compile into the table")
FORMATS.register("decisions", "llm_policy_gen.formats.decisions:DecisionsFormat",
                 description="an ordered list of 'if bins then entry', first match wins, and a default")
FORMATS.register("action", "llm_policy_gen.formats.action:ActionFormat",
                 description="one 'Action: N' line (direct mode)", table=False)

AUTO_EDITS_ABOVE = 1000
"""``--output-format auto`` answers with ``edits`` above this many states, else ``table``."""


def resolve_format_name(name: str, n_states: int) -> str:
    """``auto`` -> ``table`` or ``edits`` by the table's size; any other name as it is."""
    if name == "auto":
        return "edits" if n_states > AUTO_EDITS_ABOVE else "table"
    return name


def table_format_names() -> list[str]:
    """The formats that answer a whole table (``--output-format`` accepts these and ``auto``)."""
    return [n for n in FORMATS.names() if FORMATS.entry(n).info.get("table", True)]


def refinable_format_names() -> list[str]:
    """The formats whose answers are rule sets the population search tunes (``--rules-refine`` needs one)."""
    return [n for n in table_format_names() if FORMATS.load(n).refinable]


def make_format(name: str) -> AnswerFormat[Any]:
    """An instance of the format registered as ``name`` (a class that subclasses
    :class:`~llm_policy_gen.formats.base.AnswerFormat`, whose capabilities it inherits)."""
    fmt = FORMATS.load(name)()
    if not isinstance(fmt, AnswerFormat):  # a capability missing: the class does not subclass the protocol
        raise TypeError(f"answer format {name!r}: {type(fmt).__name__} must subclass formats.base.AnswerFormat")
    return fmt
