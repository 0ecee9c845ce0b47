"""``edits``: the second answer format, for tables too big to rewrite in full.

An edits answer is JSON::

    {"rationale": "short reason",
     "edits": [{"conditions": [{"dim": 2, "min_bin": 0, "max_bin": 1}], "action": 0},
               {"conditions": [], "action": 1}]}

Each edit sets ``action`` for every state whose bins match all of its conditions; a dimension an edit does not list
is a wildcard, so an empty ``conditions`` list means every state. Edits apply in order on a copy of the current
table (a later edit overrides an earlier one where they overlap); states no edit matches keep their action.

The dimensions are those of the observation discretizer: for a ``Box`` observation ``dim j`` is the table's j-th
dimension with bins ``0..bins[j]-1`` (as listed in the prompt); for a grid world ``dim 0`` is the row and ``dim 1``
the column; for any other ``Discrete`` observation the single ``dim 0`` is the state index itself.

For a value target (a shaping potential) an edit carries ``"value": <number>`` instead of ``"action"``.

Validation is as strict as the full-table format (:mod:`llm_policy_gen.formats.table`): integers only, every dim, bin
and action in range, ``min_bin <= max_bin``, a dimension at most once per edit, at least one edit. Any error refuses the
whole answer, with short messages that name the field so that they can be sent back for repair.

Schema bounds (:meth:`EditsFormat.json_schema`): a condition is one of the table's dimensions (an ``anyOf`` with one
alternative per dimension ``j``: ``dim`` j, ``min_bin`` and ``max_bin`` in ``0..bins[j]-1``), at most one condition
per dimension (``maxItems``), the entry in range, at least one edit. ``min_bin <= max_bin`` and a dimension named
twice are left to the validator.
"""

from __future__ import annotations

import json
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
    int_range,
    pydantic_errors,
    table_dims,
    with_enums,
)
from .table import entry_fields, format_entry

__all__ = [
    "Condition",
    "Edit",
    "ValueEdit",
    "EditsAnswer",
    "ValueEditsAnswer",
    "EditsFormat",
    "describe_edit_dims",
    "table_as_edits",
    "conditions_schema",
    "bound_boxes",
]


class Condition(BaseModel):
    """States whose bin on ``dim`` lies in ``min_bin..max_bin`` (both included)."""

    model_config = ConfigDict(extra="forbid")
    dim: StrictInt = Field(description="dimension index (see the States section)")
    min_bin: StrictInt = Field(description="lowest bin matched, included")
    max_bin: StrictInt = Field(description="highest bin matched, included")


class Edit(BaseModel):
    """Set ``action`` for every state matching all conditions; an unlisted dimension matches any bin."""

    model_config = ConfigDict(extra="forbid")
    conditions: list[Condition] = Field(description="all must hold; an empty list matches every state")
    action: StrictInt = Field(description="action index")


class ValueEdit(BaseModel):
    """Set ``value`` for every state matching all conditions; an unlisted dimension matches any bin."""

    model_config = ConfigDict(extra="forbid")
    conditions: list[Condition] = Field(description="all must hold; an empty list matches every state")
    value: StrictFloat = Field(description="value of the matched states")


class EditsAnswer(AnswerModel):
    """Edits applied in order to the current table."""

    edits: list[Edit] = Field(description="applied in order; later edits override earlier ones where they overlap")


class ValueEditsAnswer(AnswerModel):
    """Value edits applied in order to the current table of values."""

    edits: list[ValueEdit] = Field(
        description="applied in order; later edits override earlier ones where they overlap")


def describe_edit_dims(observation: ObservationDiscretizer) -> list[str]:
    """One line per dimension an edit can name, e.g. ``dim 2 = pole angle: bins 0..5``."""
    sizes = table_dims(observation)
    return [f"dim {j} = {n}: bins 0..{b - 1}" for j, (n, b) in enumerate(zip(dim_names(observation), sizes,
                                                                              strict=True))]


def conditions_schema(sizes: tuple[int, ...], description: str = "") -> dict[str, Any]:
    """The schema of a box's ``conditions``: per dimension ``j`` a condition with ``dim`` j and bins in
    ``0..sizes[j]-1`` (one ``anyOf`` alternative per dimension), each dimension at most once."""
    alternatives = []
    for j, b in enumerate(sizes):
        props = {"dim": int_range(j, j), "min_bin": int_range(0, b - 1), "max_bin": int_range(0, b - 1)}
        alternatives.append({"type": "object", "properties": props, "required": list(props),
                             "additionalProperties": False})
    item = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    out: dict[str, Any] = {"type": "array", "items": item, "maxItems": len(sizes)}
    if description:
        out["description"] = description
    return out


def bound_boxes(schema: dict[str, Any], box: str, ctx: FormatContext) -> None:
    """Put the validator's bounds on the ``$defs`` model ``box`` (an edit or a case) of ``schema``, in place: its
    conditions per dimension (:func:`conditions_schema`) and its entry (:meth:`Target.json_schema`)."""
    props = schema["$defs"][box]["properties"]
    props["conditions"] = conditions_schema(table_dims(ctx.observation), props["conditions"].get("description", ""))
    props[ctx.target.field].update(ctx.target.json_schema())
    schema["$defs"].pop("Condition", None)


def _check(edits: list[Any], sizes: tuple[int, ...], names: list[str], target: Target) -> list[str]:
    errors: list[str] = []
    k = len(sizes)
    for i, edit in enumerate(edits):
        why = target.check(getattr(edit, target.field))
        if why:
            errors.append(f"edits[{i}]: {why}")
        seen: set[int] = set()
        for j, c in enumerate(edit.conditions):
            where = f"edits[{i}].conditions[{j}]"
            if not 0 <= c.dim < k:
                errors.append(f"{where}: dim {c.dim} out of range 0..{k - 1}")
                continue
            if c.dim in seen:
                errors.append(f"{where}: dim {c.dim} listed twice in one edit")
            seen.add(c.dim)
            top = sizes[c.dim] - 1
            if not (0 <= c.min_bin <= top and 0 <= c.max_bin <= top):
                errors.append(f"{where}: dim {c.dim} ({names[c.dim]}) bins must be in 0..{top}, "
                              f"got min_bin {c.min_bin}, max_bin {c.max_bin}")
            elif c.min_bin > c.max_bin:
                errors.append(f"{where}: min_bin {c.min_bin} > max_bin {c.max_bin}")
    return errors


class EditsFormat(AnswerFormat[np.ndarray]):
    """``edits``: changes to the current table as boxes of bins."""

    name = "edits"

    def _model(self, target: Target) -> type[BaseModel]:
        return EditsAnswer if target.kind == "action" else ValueEditsAnswer

    def json_schema(self, ctx: FormatContext) -> dict[str, Any]:
        """The answer's schema with the validator's bounds: dims, bins per dim, entries and at least one edit."""
        schema = self._model(ctx.target).model_json_schema()
        bound_boxes(schema, "Edit" if ctx.target.kind == "action" else "ValueEdit", ctx)
        schema["properties"]["edits"]["minItems"] = 1
        return with_enums(schema)

    def prompt_section(self, ctx: FormatContext) -> str:
        return fill("format_edits.md", max_state=ctx.n_states - 1, dims="\n".join(describe_edit_dims(ctx.observation)),
                    **entry_fields(ctx.target))

    def parse(self, text: str, ctx: FormatContext) -> Parsed[np.ndarray]:
        """Validate an edits answer and apply it, in order, to a copy of the current table."""
        target = ctx.target
        current = target.array(ctx.current).reshape(-1)
        sizes = table_dims(ctx.observation)
        obj = extract_json_object(text, "edits")
        try:
            answer: Any = self._model(target).model_validate(obj)
        except ValidationError as exc:
            raise ProposalError(pydantic_errors(exc), text) from None
        if not answer.edits:
            raise ProposalError([f"edits is empty: give at least one edit {{\"conditions\": [...], "
                                 f"\"{target.field}\": ...}}"], text)
        errors = _check(answer.edits, sizes, dim_names(ctx.observation), target)
        if errors:
            raise ProposalError(cap_errors(errors), text)
        table = current.copy()
        view = table.reshape(sizes)
        matched = np.zeros(sizes, dtype=np.int32)
        idle = 0
        for edit in answer.edits:
            region: list[slice] = [slice(None)] * len(sizes)
            for c in edit.conditions:
                region[c.dim] = slice(c.min_bin, c.max_bin + 1)
            idx = tuple(region)
            entry = getattr(edit, target.field)
            idle += int(np.all(view[idx] == entry))
            view[idx] = entry
            matched[idx] += 1
        dup = int(np.sum(matched > 1))
        notes = []
        if dup:
            notes.append(f"{dup} states matched by several edits: the last matching edit counts")
        if idle:
            notes.append(f"{idle} of {len(answer.edits)} edits changed no state")
        return Parsed(table, answer.rationale, int(np.sum(table != current)), notes)

    def render(self, value: np.ndarray, ctx: FormatContext, rationale: str) -> str:
        """An edits answer whose application to the current table gives exactly ``value``.

        Changed states are grouped into runs of equal entries along the last dimension, and runs that line up join
        into boxes along the earlier dimensions; each box is one edit, with full-range dimensions left out. A table
        equal to the current one gives a single no-op edit.
        """
        target = ctx.target
        cur = target.array(ctx.current).reshape(-1)
        new = target.array(value).reshape(-1)
        if cur.shape != new.shape:
            raise ValueError(f"tables differ in size: {cur.size} and {new.size}")
        boxes = _edits_between(cur, new, table_dims(ctx.observation))
        f = target.field
        parts = [f'{{"conditions":{json.dumps(b["conditions"], separators=(",", ":"))},"{f}":'
                 f'{format_entry(target, b["entry"])}}}' for b in boxes]
        return f'{{"rationale":{json.dumps(rationale)},"edits":[{",".join(parts)}]}}'


def _condition(dim: int, lo: int, hi: int) -> dict[str, int]:
    return {"dim": dim, "min_bin": lo, "max_bin": hi}


def _runs(cur: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Maximal runs of equal entries of ``new`` along its rows (2-D) that contain at least one change from ``cur``:
    their rows, first and last columns, and the entry's index in ``new.reshape(-1)``."""
    rows, width = new.shape
    starts = np.ones(new.shape, dtype=bool)
    starts[:, 1:] = new[:, 1:] != new[:, :-1]  # NaN != NaN: a NaN is a run of its own, as with ``==``
    begins = np.flatnonzero(starts)
    changed = np.add.reduceat((cur != new).reshape(-1).astype(np.int64), begins) > 0
    first = begins[changed]
    last = (np.append(begins[1:], rows * width) - 1)[changed]
    return first // width, first % width, last % width, first


_PACK_BELOW = 2**62
"""Sort keys are packed into one integer while the number of distinct keys stays below this."""


def _sort_keys(boxes: np.ndarray, codes: np.ndarray, n_codes: int, sizes: tuple[int, ...],
               skip: int | None = None) -> list[np.ndarray]:
    """Sort keys (least significant first, as :func:`numpy.lexsort` takes them) ordering boxes by their ranges on
    every dimension but ``skip``, in order, then by entry code: one packed integer key when it fits in 62 bits (a
    big table's boxes sort several times faster), else one key per range bound."""
    dims = [j for j in range(len(sizes)) if j != skip]
    radix = n_codes
    for j in dims:
        radix *= sizes[j] * sizes[j]
    if radix < _PACK_BELOW:
        key = np.zeros(len(boxes), dtype=np.int64)
        for j in dims:
            key = (key * sizes[j] + boxes[:, j, 0]) * sizes[j] + boxes[:, j, 1]
        return [key * n_codes + codes]
    return [codes, *(boxes[:, j, i] for j in reversed(dims) for i in (1, 0))]


def _merge_along(boxes: np.ndarray, codes: np.ndarray, n_codes: int, sizes: tuple[int, ...],
                 dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Join boxes (``(n, dims, 2)`` bin ranges, one entry code each) with the same entry and ranges elsewhere whose
    ranges on ``dim`` touch."""
    n = len(boxes)
    if n < 2:
        return boxes, codes
    keys = _sort_keys(boxes, codes, n_codes, sizes, skip=dim)
    order = np.lexsort((boxes[:, dim, 0], *keys))
    b = boxes[order]
    same = np.ones(n - 1, dtype=bool)
    for k in keys:
        ks = k[order]
        same &= ks[1:] == ks[:-1]
    same &= b[1:, dim, 0] == b[:-1, dim, 1] + 1
    first = np.flatnonzero(np.concatenate(([True], ~same)))
    last = np.append(first[1:], n) - 1
    merged = b[first]
    merged[:, dim, 1] = b[last, dim, 1]
    return merged, codes[order][first]


def _edits_between(cur: np.ndarray, new: np.ndarray, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Non-overlapping boxes ``{"conditions", "entry"}`` that turn ``cur`` into ``new``."""
    changed = cur != new
    if not changed.any():
        # Nothing to change: one no-op edit (an empty list is refused), pinning the first state to its entry.
        pin = [_condition(j, 0, 0) for j, b in enumerate(sizes) if b > 1]
        return [{"conditions": pin, "entry": cur[0].item()}]
    last = sizes[-1]
    prefix_sizes = sizes[:-1]
    # Boxes: runs of equal new entries along the last dimension (in rows with a change), then joined along each
    # earlier dimension in turn wherever neighbouring boxes share the entry and every other range. Boxes never
    # overlap and hold only states whose new entry is theirs, so the edits can come in any order. All in arrays:
    # a Hopper-v5.rich table (560,000 states) starts from about 290,000 boxes.
    rows, lo, hi, at = _runs(cur.reshape(-1, last), new.reshape(-1, last))
    boxes = np.empty((len(rows), len(sizes), 2), dtype=np.int64)
    if prefix_sizes:
        prefix = np.stack(np.unravel_index(rows, prefix_sizes), axis=1)
        boxes[:, :-1, 0] = boxes[:, :-1, 1] = prefix
    boxes[:, -1, 0], boxes[:, -1, 1] = lo, hi
    entries = new.reshape(-1)[at]
    values, codes = np.unique(entries, return_inverse=True, equal_nan=False)
    codes = codes.reshape(-1)
    for _ in range(3):  # a join along an early dimension can allow new ones along later dimensions
        before = len(boxes)
        for dim in range(len(sizes) - 1, -1, -1):
            boxes, codes = _merge_along(boxes, codes, len(values), sizes, dim)
        if len(boxes) == before:
            break
    order = np.lexsort(_sort_keys(boxes, codes, len(values), sizes))
    full = [(0, b - 1) for b in sizes]
    return [
        {"conditions": [_condition(j, lo_, hi_) for j, (lo_, hi_) in enumerate(ranges) if (lo_, hi_) != full[j]],
         "entry": a}
        for ranges, a in zip(boxes[order].tolist(), values[codes[order]].tolist(), strict=True)
    ]


def table_as_edits(table: np.ndarray, observation: ObservationDiscretizer) -> list[dict[str, Any]]:
    """The whole table as non-overlapping boxes ``{"conditions", "entry"}`` of equal entries: a compact view.

    A table that depends on few dimensions comes out in few lines (BipedalWalker's prior table: 2 edits instead of
    10,000 rows); an irregular table can take more characters than one row per state.
    """
    t = np.asarray(table).reshape(-1)
    fill_value = -1 if np.issubdtype(t.dtype, np.integer) else np.nan
    return _edits_between(np.full_like(t, fill_value), t, table_dims(observation))
