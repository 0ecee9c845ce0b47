"""The full-table answer: one row per state.

::

    {"rationale": "short reason", "rows": [{"state": 0, "action": 1}, {"state": 1, "action": 0}, ...]}

For a value target (a shaping potential) the rows carry ``"value": <number>`` instead of ``"action"``.

Validation rules (the same for every backend, the offline optimiser included):

* The answer may be wrapped in prose or code fences; the first JSON object holding ``rows`` is used.
* Every ``state`` must be an integer in ``0..n_states-1`` and every entry valid for the target (an integer action in
  ``0..n_actions-1``, no strings, floats or booleans; or a finite number in the value range). Any such error refuses
  the whole answer.
* **Duplicates**: a state given twice takes its last row (rows apply in order); duplicates are counted.
* **Missing states** keep the entry of the current table; they are counted.
* An empty ``rows`` list is refused.

Schema bounds (:meth:`TableFormat.json_schema`): ``state`` in ``0..n_states-1`` and ``action`` in ``0..n_actions-1``
(each also an ``enum`` up to :data:`~llm_policy_gen.formats.base.ENUM_LARGEST` values: FrozenLake's 16 states are
enforced by a llama.cpp grammar, CartPole's 324 only by ``minimum``/``maximum``, which such a grammar ignores and the
validator checks), a ``value`` in the target's range, ``rows`` at least one item and, up to :data:`ROWS_BOUND_UP_TO`
states, at most one per state. So the validator also takes answers the schema does not: more rows than states (the
last row of a state counts), each equal to the same answer without the rows that a later row overrides.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from ..errors import ProposalError
from ..storage.templates import fill
from .base import (
    AnswerFormat,
    AnswerModel,
    FormatContext,
    Parsed,
    Target,
    cap_errors,
    extract_json_object,
    int_range,
    pydantic_errors,
    with_enums,
)

__all__ = ["ActionRow", "ValueRow", "TableAnswer", "ValueTableAnswer", "TableFormat", "entry_fields",
           "ROWS_BOUND_UP_TO"]

ROWS_BOUND_UP_TO = 1000
"""Tables of up to this many states bound ``rows`` to one row per state (``maxItems``) in the schema."""


class ActionRow(BaseModel):
    """The action chosen for one state."""

    model_config = ConfigDict(extra="forbid")
    state: StrictInt = Field(description="flat state index")
    action: StrictInt = Field(description="action index")


class ValueRow(BaseModel):
    """The value of one state."""

    model_config = ConfigDict(extra="forbid")
    state: StrictInt = Field(description="flat state index")
    value: StrictFloat = Field(description="value of the state")


class TableAnswer(AnswerModel):
    """A full table: one row per state."""

    rows: list[ActionRow] = Field(description="one row per state; missing states keep their current action")


class ValueTableAnswer(AnswerModel):
    """A full table of values: one row per state."""

    rows: list[ValueRow] = Field(description="one row per state; missing states keep their current value")


def entry_fields(target: Target) -> dict[str, Any]:
    """Template fields that describe one table entry (shared by the table and edits prompt sections)."""
    if target.kind == "action":
        return {"field": "action", "placeholder": "<int>", "entry": target.describe(),
                "example_a": 0, "example_b": min(1, max(0, target.n_actions - 1))}
    return {"field": "value", "placeholder": "<number>", "entry": target.describe(), "example_a": 0.0,
            "example_b": round(min(target.high, max(target.low, 1.0)), 3)}


def format_entry(target: Target, x: Any) -> str:
    """One entry as JSON text (integers for actions, shortest round-tripping float for values)."""
    return str(int(x)) if target.kind == "action" else json.dumps(float(x))


class TableFormat(AnswerFormat[np.ndarray]):
    """``table``: every row of the table."""

    name = "table"

    def _model(self, target: Target) -> type[BaseModel]:
        return TableAnswer if target.kind == "action" else ValueTableAnswer

    def json_schema(self, ctx: FormatContext) -> dict[str, Any]:
        """The answer's schema with the validator's bounds: states, entries and at least one row."""
        target = ctx.target
        schema = self._model(target).model_json_schema()
        row = schema["$defs"]["ActionRow" if target.kind == "action" else "ValueRow"]["properties"]
        row["state"].update(int_range(0, ctx.n_states - 1))
        row[target.field].update(target.json_schema())
        schema["properties"]["rows"]["minItems"] = 1
        # More rows than states can only repeat a state (the last one wins): the schema stops there, so that a
        # grammar-constrained model cannot go on listing rows until its context is full. llama.cpp refuses the
        # grammar of a longer bound (measured: 1,000 is taken, 1,500 is not), so bigger tables go without.
        if ctx.n_states <= ROWS_BOUND_UP_TO:
            schema["properties"]["rows"]["maxItems"] = ctx.n_states
        return with_enums(schema)

    def prompt_section(self, ctx: FormatContext) -> str:
        return fill("format_table.md", max_state=ctx.n_states - 1, **entry_fields(ctx.target))

    def parse(self, text: str, ctx: FormatContext) -> Parsed[np.ndarray]:
        target, n_states = ctx.target, ctx.n_states
        obj = extract_json_object(text, "rows")
        try:
            answer: Any = self._model(target).model_validate(obj)
        except ValidationError as exc:
            raise ProposalError(pydantic_errors(exc), text) from None
        if not answer.rows:
            raise ProposalError([f"rows is empty: give a {target.field} for states 0..{n_states - 1}"], text)
        errors: list[str] = []
        for i, row in enumerate(answer.rows):
            entry = getattr(row, target.field)
            if not 0 <= row.state < n_states:
                errors.append(f"rows[{i}]: state {row.state} out of range 0..{n_states - 1}")
            why = target.check(entry)
            if why:
                errors.append(f"rows[{i}]: {why} (state {row.state})")
        if errors:
            raise ProposalError(cap_errors(errors), text)
        current = target.array(ctx.current)
        table = current.copy()
        seen = np.zeros(n_states, dtype=bool)
        dup = 0
        for row in answer.rows:
            dup += int(seen[row.state])
            seen[row.state] = True
            table[row.state] = getattr(row, target.field)
        missing = int(n_states - seen.sum())
        notes = []
        if dup:
            notes.append(f"{dup} duplicate state rows: the last row of each state was used")
        if missing:
            notes.append(f"{missing} states missing: they keep their current {target.field}")
        return Parsed(table, answer.rationale, int(np.sum(table != current)), notes)

    def render(self, value: np.ndarray, ctx: FormatContext, rationale: str) -> str:
        f, t = ctx.target.field, ctx.target
        rows = ",".join(f'{{"state":{s},"{f}":{format_entry(t, a)}}}' for s, a in enumerate(np.asarray(value)))
        return f'{{"rationale":{json.dumps(rationale)},"rows":[{rows}]}}'
