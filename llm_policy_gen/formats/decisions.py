"""``decisions``: the whole table as a decision list, ``if <conditions on bins> then <entry>``, first match wins.

::

    {"rationale": "short reason",
     "decisions": [{"when": [{"dim": 2, "min_bin": 0, "max_bin": 2}], "then": 0}, {"when": [], "then": 1}],
     "default": 1}

A state takes the ``then`` of the first decision whose conditions (``when``, as in the ``edits`` format: a range of
bins on one dimension, all must hold, an unlisted dimension matches any bin) it meets; a state no decision matches
takes ``default``. The table is compiled from the list alone (the current table plays no part), and the list travels
with it as the policy's ``source``. Any error refuses the whole answer, with messages that name the field.

The format is a plug-in like any other, and says what it can do through its capabilities: the prompt shows the
current list, not the table (:attr:`DecisionsFormat.shows_table` False, :meth:`DecisionsFormat.current_text`); a
table that was not compiled from a list (the initial one, or a non-LLM proposer's) is written as the list equal to
it, which is also how :meth:`DecisionsFormat.render` answers for the ``offline`` search.

Schema bounds: the conditions of a decision per dimension (:func:`~.edits.conditions_schema`), ``then`` and
``default`` in the target's range and, up to :data:`~.table.ROWS_BOUND_UP_TO` states, at most one decision per state
(more can only repeat a box; the list equal to any table has fewer). ``min_bin <= max_bin``, a dimension named twice
and longer lists are left to the validator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from ..discretize import ObservationDiscretizer
from ..errors import ProposalError
from ..storage.templates import fill
from .base import (
    AnswerFormat,
    AnswerModel,
    FormatContext,
    Parsed,
    Target,
    cap_errors,
    dim_names,
    extract_json_object,
    pydantic_errors,
    table_dims,
    with_enums,
)
from .edits import Condition, Edit, ValueEdit, _check, conditions_schema, describe_edit_dims
from .ruleset import table_as_rules
from .table import ROWS_BOUND_UP_TO, entry_fields

__all__ = ["DecisionsFormat"]



class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    when: list[Condition] = Field(description="all must hold; [] matches every state")
    then: StrictInt = Field(description="the action of the states this decision matches first")


class _ValueDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    when: list[Condition] = Field(description="all must hold; [] matches every state")
    then: StrictFloat = Field(description="the value of the states this decision matches first")


class _Answer(AnswerModel):
    decisions: list[_Decision] = Field(description="in order: the first decision a state matches decides it")
    default: StrictInt = Field(description="the action of the states no decision matches")


class _ValueAnswer(AnswerModel):
    decisions: list[_ValueDecision] = Field(description="in order: the first decision a state matches decides it")
    default: StrictFloat = Field(description="the value of the states no decision matches")


def _list(source: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], Any] | None:
    """The (decisions, default) a policy's ``source`` holds, or None (no source, or another format's)."""
    if source is None or source.get("format") != "decisions":
        return None
    return [dict(d) for d in source["decisions"]], source["default"]


class DecisionsFormat(AnswerFormat[np.ndarray]):
    """``decisions``: an ordered list of ``if conditions then entry``, first match wins, and a default."""

    name = "decisions"
    shows_table = False  # the prompt shows the current list (current_text)

    def _model(self, target: Target) -> type[BaseModel]:
        return _Answer if target.kind == "action" else _ValueAnswer

    def json_schema(self, ctx: FormatContext) -> dict[str, Any]:
        schema = self._model(ctx.target).model_json_schema()
        box = schema["$defs"]["_Decision" if ctx.target.kind == "action" else "_ValueDecision"]["properties"]
        box["when"] = conditions_schema(table_dims(ctx.observation), box["when"].get("description", ""))
        box["then"].update(ctx.target.json_schema())
        schema["$defs"].pop("Condition", None)
        schema["properties"]["default"].update(ctx.target.json_schema())
        if ctx.n_states <= ROWS_BOUND_UP_TO:  # a grammar-constrained model cannot go on listing decisions
            schema["properties"]["decisions"]["maxItems"] = ctx.n_states
        return with_enums(schema)

    def prompt_section(self, ctx: FormatContext) -> str:
        return fill("format_decisions.md", max_state=ctx.n_states - 1,
                    dims="\n".join(describe_edit_dims(ctx.observation)), **entry_fields(ctx.target))

    def parse(self, text: str, ctx: FormatContext) -> Parsed[np.ndarray]:
        """Validate a decision list and compile it into the whole table (``source``: the list)."""
        target = ctx.target
        obj = extract_json_object(text, "decisions")
        try:
            answer: Any = self._model(target).model_validate(obj)
        except ValidationError as exc:
            raise ProposalError(pydantic_errors(exc), text) from None
        box = Edit if target.kind == "action" else ValueEdit
        as_edits = [box.model_construct(conditions=d.when, **{target.field: d.then}) for d in answer.decisions]
        sizes = table_dims(ctx.observation)
        errors = [e.replace("edits[", "decisions[").replace(".conditions[", ".when[")
                  for e in _check(as_edits, sizes, dim_names(ctx.observation), target)]
        if why := target.check(answer.default):
            errors.append(f"default: {why}")
        if errors:
            raise ProposalError(cap_errors(errors), text)
        view = np.full(sizes, answer.default, dtype=target.array(0).dtype)
        for d in reversed(answer.decisions):  # the first match wins: earlier decisions are written last
            region = [slice(None)] * len(sizes)
            for c in d.when:
                region[c.dim] = slice(c.min_bin, c.max_bin + 1)
            view[tuple(region)] = d.then
        table = view.reshape(-1)
        decisions = [{"when": [c.model_dump() for c in d.when], "then": d.then} for d in answer.decisions]
        source = {"format": self.name, "decisions": decisions, "default": answer.default}
        changed = int(np.sum(table != target.array(ctx.current).reshape(-1)))
        return Parsed(table, answer.rationale, changed, [], source)

    def render(self, value: np.ndarray, ctx: FormatContext, rationale: str) -> str:
        """A table as the decision list equal to it: the most common entry as default, boxes of the others."""
        decisions, default = _as_list(np.asarray(value), ctx.observation, ctx.target)
        return json.dumps({"rationale": rationale, "decisions": decisions, "default": default},
                          separators=(",", ":"))

    def current_text(self, table: np.ndarray, observation: ObservationDiscretizer, target: Target, budget: int,
                     size: Callable[[str], int], source: Mapping[str, Any] | None = None) -> str:
        """The list the table was compiled from, else the list equal to it; its first decisions when it does not
        fit ``budget``."""
        found = _list(source)
        head = "The current decision list (the table is compiled from it):"
        if found is None:
            found = _as_list(table, observation, target)
            head = "The current table, written as a decision list (it was not compiled from one):"
        decisions, default = found
        kept: list[dict[str, Any]] = []
        for d in decisions:
            if size(json.dumps({"decisions": [*kept, d], "default": default}, separators=(",", ":"))) > budget:
                break
            kept.append(d)
        text = json.dumps({"decisions": kept, "default": default}, separators=(",", ":"))
        if len(kept) < len(decisions):
            text += f"\n({len(decisions) - len(kept)} more decisions not shown: the first {len(kept)} of " \
                    f"{len(decisions)})"
        return f"{head}\n{text}"


def _as_list(table: np.ndarray, observation: ObservationDiscretizer, target: Target) -> tuple[list[dict[str, Any]],
                                                                                               Any]:
    """The decision list equal to ``table`` (non-overlapping boxes, so their order does not matter) and its
    default."""
    rules = table_as_rules(table, observation, target)
    return [{"when": c["conditions"], "then": c[target.field]} for c in rules.cases], rules.otherwise
