"""What a backend must answer, and how an answer becomes a table (or is refused).

A proposal is JSON. The full-table format is::

    {"rationale": "short reason", "rows": [{"state": 0, "action": 1}, {"state": 1, "action": 0}, ...]}

Validation rules (the same for every backend, the offline optimiser included):

* The answer may be wrapped in prose or code fences; the first JSON object holding ``rows`` is used.
* Every ``state`` must be an integer in ``0..n_states-1`` and every ``action`` an integer in ``0..n_actions-1``
  (no strings, floats or booleans). Any such error refuses the whole proposal.
* **Duplicates**: a state given twice takes its last row (rows apply in order); duplicates are counted.
* **Missing states** keep the action of the current table; they are counted.
* An empty ``rows`` list is refused.

Error messages are short and name the field, so they can be sent back to a model for repair.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from .errors import ProposalError

__all__ = [
    "Row",
    "TableProposal",
    "ParsedProposal",
    "OutputFormatName",
    "extract_json_object",
    "parse_proposal",
    "json_schema_for",
    "render_table_answer",
    "MAX_ERRORS",
    "cap_errors",
    "pydantic_errors",
]

OutputFormatName = Literal["table", "edits"]
MAX_ERRORS = 8


class Row(BaseModel):
    """The action chosen for one state."""

    model_config = ConfigDict(extra="forbid")
    state: StrictInt = Field(description="flat state index")
    action: StrictInt = Field(description="action index")


class TableProposal(BaseModel):
    """A full table: one row per state."""

    model_config = ConfigDict(extra="forbid")
    rationale: StrictStr = Field(description="one or two sentences on what changed and why")
    rows: list[Row] = Field(description="one row per state; missing states keep their current action")


@dataclass
class ParsedProposal:
    """A validated proposal turned into a complete table."""

    table: np.ndarray
    rationale: str
    n_rows: int
    n_duplicates: int
    n_missing: int
    n_changed: int
    format: OutputFormatName = "table"
    notes: list[str] = field(default_factory=list)


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def extract_json_object(text: str, required_key: str) -> dict[str, Any]:
    """The first JSON object in ``text`` that holds ``required_key`` (code fences and prose are skipped)."""
    if not isinstance(text, str) or not text.strip():
        raise ProposalError(["empty answer: reply with one JSON object"], text if isinstance(text, str) else "")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    saw_object = False
    last_error = ""
    for chunk in candidates:
        stripped = chunk.strip()
        try:
            obj = json.loads(stripped)
            if isinstance(obj, dict):
                saw_object = True
                if required_key in obj:
                    return obj
        except json.JSONDecodeError as exc:
            last_error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        for m in re.finditer(r"\{", chunk):
            try:
                obj, _ = decoder.raw_decode(chunk, m.start())
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                saw_object = True
                if required_key in obj:
                    return obj
    if f'"{required_key}"' in text:
        detail = f" ({last_error})" if last_error else ""
        raise ProposalError([f"invalid or truncated JSON{detail}: reply with one complete JSON object"], text)
    if saw_object:
        raise ProposalError([f"no JSON object with a {required_key!r} field found"], text)
    detail = f" ({last_error})" if last_error else ""
    if "{" in text:
        raise ProposalError([f"invalid or truncated JSON{detail}: reply with one complete JSON object"], text)
    raise ProposalError(["no JSON object found: reply with one JSON object, no prose"], text)


def pydantic_errors(exc: ValidationError) -> list[str]:
    """Short repair-ready messages for a pydantic validation error (at most ``MAX_ERRORS`` of them)."""
    msgs = []
    for err in exc.errors()[:MAX_ERRORS]:
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        got = err.get("input")
        got_s = json.dumps(got)[:40] if not isinstance(got, (dict, list)) else type(got).__name__
        msgs.append(f"{loc or 'answer'}: {err['msg']} (got {got_s})")
    if len(exc.errors()) > MAX_ERRORS:
        msgs.append(f"... and {len(exc.errors()) - MAX_ERRORS} more type errors")
    return msgs


def cap_errors(errors: list[str]) -> list[str]:
    """At most ``MAX_ERRORS`` messages, then one saying how many more there were."""
    if len(errors) > MAX_ERRORS:
        return errors[:MAX_ERRORS] + [f"... and {len(errors) - MAX_ERRORS} more errors"]
    return errors


def parse_proposal(
    text: str,
    current_table: np.ndarray,
    n_actions: int,
    fmt: OutputFormatName = "table",
    apply_edits: Any = None,
    observation: Any = None,
) -> ParsedProposal:
    """Validate ``text`` against the table (or edits) format; return the complete new table.

    Raises :class:`ProposalError` with repair-ready messages when the answer is refused.
    ``apply_edits(text, current_table, n_actions, observation)`` applies an edits answer (see
    :mod:`llm_policy_gen.edits`); ``observation`` is the run's observation discretizer.
    """
    n_states = int(len(current_table))
    if fmt == "edits":
        if apply_edits is None:
            raise ProposalError(["the edits format is not available for this run"], text)
        return apply_edits(text, current_table, n_actions, observation)  # type: ignore[no-any-return]
    obj = extract_json_object(text, "rows")
    try:
        proposal = TableProposal.model_validate(obj)
    except ValidationError as exc:
        raise ProposalError(pydantic_errors(exc), text) from None
    if not proposal.rows:
        raise ProposalError([f"rows is empty: give an action for states 0..{n_states - 1}"], text)
    errors: list[str] = []
    for i, row in enumerate(proposal.rows):
        if not 0 <= row.state < n_states:
            errors.append(f"rows[{i}]: state {row.state} out of range 0..{n_states - 1}")
        if not 0 <= row.action < n_actions:
            errors.append(f"rows[{i}]: action {row.action} out of range 0..{n_actions - 1} (state {row.state})")
    if errors:
        raise ProposalError(cap_errors(errors), text)
    table = np.array(current_table, dtype=np.int64, copy=True)
    seen = np.zeros(n_states, dtype=bool)
    dup = 0
    for row in proposal.rows:
        if seen[row.state]:
            dup += 1
        seen[row.state] = True
        table[row.state] = row.action
    missing = int(n_states - seen.sum())
    notes = []
    if dup:
        notes.append(f"{dup} duplicate state rows: the last row of each state was used")
    if missing:
        notes.append(f"{missing} states missing: they keep their current action")
    return ParsedProposal(
        table=table,
        rationale=proposal.rationale,
        n_rows=len(proposal.rows),
        n_duplicates=dup,
        n_missing=missing,
        n_changed=int(np.sum(table != np.asarray(current_table))),
        format="table",
        notes=notes,
    )


def json_schema_for(fmt: OutputFormatName = "table") -> dict[str, Any]:
    """The JSON schema handed to providers' native structured output for ``fmt``."""
    if fmt == "edits":
        from .edits import EditsProposal

        return EditsProposal.model_json_schema()
    return TableProposal.model_json_schema()


def render_table_answer(table: np.ndarray, rationale: str) -> str:
    """A full-table answer as compact JSON text (what the offline optimiser sends)."""
    rows = ",".join(f'{{"state":{s},"action":{int(a)}}}' for s, a in enumerate(np.asarray(table)))
    return f'{{"rationale":{json.dumps(rationale)},"rows":[{rows}]}}'
