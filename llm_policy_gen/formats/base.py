"""What every answer format shares: the target of an answer, the context it is parsed in, and JSON helpers.

An :class:`AnswerFormat` turns a model's text into a value the run can use, and back: its JSON schema goes to the
provider's native structured output, its prompt section tells the model the exact shape, :meth:`AnswerFormat.parse`
validates (refusing with repair-ready messages through :class:`~llm_policy_gen.errors.ProposalError`) and
:meth:`AnswerFormat.render` writes a value as answer text (what the non-LLM proposers send, so that their answers go
through the same parser and validator as a model's).

**Schemas carry the validator's bounds** (issue 18), so that a provider's structured output or a local runtime's
grammar can keep a model inside them: each range is ``minimum``/``maximum`` plus, for ranges of at most
:data:`ENUM_LARGEST` values (smallest first, within :data:`ENUM_BUDGET` values a schema), an ``enum`` of every value
(:func:`int_range`, :func:`with_enums`); list lengths are ``minItems``/``maxItems``. llama.cpp's grammar converter
(``LlamaGrammar.from_json_schema``, used by the in-process backend and ``llama_cpp.server``) enforces ``enum``,
``const``, ``anyOf``, ``required``, ``additionalProperties: false`` and ``minItems``/``maxItems``, and ignores
``minimum``/``maximum`` and a ``pattern`` on numbers; it writes the required properties first, then the optional
ones. The schemas stay within what OpenAI's strict mode, Gemini's ``responseJsonSchema`` and Anthropic's schema
transform accept (an object root, every object closed, no ``pattern``, at most 1,000 enum values). A client whose
provider refuses a keyword steps down with :func:`without_keywords`. What a schema cannot say (``min_bin <=
max_bin``, a dimension once per box, ascending thresholds, each output once) the validator still refuses, with
repair messages.

The **target** says what a table holds: one action index per state (:class:`Target` ``kind="action"``, the policy
modes and the advisor) or one number per state (``kind="value"``, a shaping potential). Table and edits answers work
for both.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from ..discretize import ActionDiscretizer, BoxDiscretizer, DiscreteDiscretizer, ObservationDiscretizer
from ..errors import JSONBounds, ProposalError
from ..registry import PluginOptions, setting
from ..storage.safe_json import check_text, loads, raw_decode

if TYPE_CHECKING:
    from ..envs.spec import EnvSpec

__all__ = [
    "Target",
    "RefineOptions",
    "FormatContext",
    "Parsed",
    "AnswerFormat",
    "AnswerModel",
    "MAX_ERRORS",
    "extract_json_object",
    "pydantic_errors",
    "cap_errors",
    "table_dims",
    "dim_names",
    "ENUM_BUDGET",
    "ENUM_LARGEST",
    "int_range",
    "number_range",
    "with_enums",
    "without_keywords",
]

MAX_ERRORS = 8
V = TypeVar("V")


@dataclass(frozen=True)
class Target:
    """What one entry of the table is: an action index in ``0..n_actions-1``, or a number in ``[low, high]``."""

    kind: Literal["action", "value"] = "action"
    n_actions: int = 0
    low: float = -1e6
    high: float = 1e6
    meaning: str = ""
    """What a value means, for prompts (e.g. "shaping potential of the state")."""

    @property
    def field(self) -> str:
        """The JSON field that carries an entry (``action`` or ``value``)."""
        return self.kind

    def check(self, x: float | int) -> str | None:
        """Why ``x`` is not a valid entry, or None."""
        if self.kind == "action":
            if not 0 <= int(x) < self.n_actions:
                return f"action {x} out of range 0..{self.n_actions - 1}"
            return None
        if not (np.isfinite(x) and self.low <= x <= self.high):
            return f"value {x} out of range [{self.low:g}, {self.high:g}]"
        return None

    def describe(self) -> str:
        if self.kind == "action":
            return f"an integer action in 0..{self.n_actions - 1}"
        return f"a number in [{self.low:g}, {self.high:g}]"

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of one entry, with the bounds :meth:`check` enforces."""
        if self.kind == "action":
            return int_range(0, self.n_actions - 1)
        return number_range(self.low, self.high)

    def array(self, values: Any) -> np.ndarray:
        """``values`` as the table's dtype (int64 actions, float64 values)."""
        return np.asarray(values, dtype=np.int64 if self.kind == "action" else np.float64)


@dataclass
class FormatContext:
    """What parsing and rendering need: the discretizers, the current table and the target."""

    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    current: np.ndarray
    """The table an answer edits (the incumbent): actions or values per state."""
    target: Target
    spec: EnvSpec | None = None

    @property
    def n_states(self) -> int:
        return int(self.observation.n_states)


@dataclass
class Parsed(Generic[V]):
    """A validated answer."""

    value: V
    """A complete table (for table, edits and rules answers) or whatever the format yields (an action)."""
    rationale: str = ""
    n_changed: int = 0
    notes: list[str] = field(default_factory=list)
    source: dict[str, Any] | None = None
    """What the value compiles from, kept in policy files (rules answers)."""


class RefineOptions(PluginOptions):
    """The options of a refinable format (:attr:`AnswerFormat.refinable`): the numbers of the rules a model wrote,
    tuned between model calls."""

    rules_refine: int = setting(0, "an integer >= 0", "Rules answers from an LLM: after each model call, this many "
                                "iterations in which the population search tunes the numbers of the kept rules "
                                "without calling the model (0: every iteration asks the model).", ge=0)


@runtime_checkable
class AnswerFormat(Protocol[V]):
    """A way of answering: schema, prompt section, parser and renderer, and its capabilities.

    The capabilities are what the rest of the package asks a format (the prompt builder, the proposers, the
    preflight), never its name. A format class subclasses this protocol to inherit their defaults (those of a plain
    table answer) and sets the ones it differs in."""

    name: str

    shows_table: ClassVar[bool] = True
    """The prompt prints the current table: its rows, or regions of equal entries when they do not fit. False: it
    prints what :meth:`current_text` writes instead and the table never appears (``rules``: the rules the table was
    compiled from, since a big table cannot be printed)."""
    summarises_evidence: ClassVar[bool] = False
    """The prompt's evidence is one summary line per observation dimension, always whole, and episode steps name
    their bins; False: one row per visited state, the least visited cut to fit the prompt's cap."""
    refinable: ClassVar[bool] = False
    """Answers are rule sets (:class:`~.ruleset.RuleSet`, which :meth:`render` takes) whose numbers the population
    search tunes: ``offline`` answers with its search over linear rules, and ``--rules-refine`` needs such a format."""

    def current_text(self, table: np.ndarray, observation: ObservationDiscretizer, target: Target, budget: int,
                     size: Callable[[str], int], source: Mapping[str, Any] | None = None) -> str:
        """The current answer as prompt text under ``budget`` (measured by ``size``), for a format that does not show
        the table (:attr:`shows_table` False); ``source``: what ``table`` was compiled from (None: it was not)."""
        raise NotImplementedError(f"{type(self).__name__} shows the table: it writes no text of its own")

    def json_schema(self, ctx: FormatContext) -> dict[str, Any] | None:
        """The JSON schema for native structured output (None: plain text)."""
        ...

    def prompt_section(self, ctx: FormatContext) -> str:
        """The "Output format" section of the prompt."""
        ...

    def parse(self, text: str, ctx: FormatContext) -> Parsed[V]:
        """Validate ``text``; raise :class:`ProposalError` with repair-ready messages when it is refused."""
        ...

    def render(self, value: V, ctx: FormatContext, rationale: str) -> str:
        """``value`` as answer text that :meth:`parse` turns back into exactly ``value``."""
        ...


class AnswerModel(BaseModel):
    """The base of every JSON answer's pydantic model: no unknown fields, and a short rationale first."""

    model_config = ConfigDict(extra="forbid")
    rationale: StrictStr = Field(description="one or two sentences on what changed and why")


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def extract_json_object(text: str, required_key: str) -> dict[str, Any]:
    """The first JSON object in ``text`` that holds ``required_key`` (code fences and prose are skipped)."""
    if not isinstance(text, str) or not text.strip():
        raise ProposalError(["empty answer: reply with one JSON object"], text if isinstance(text, str) else "")
    try:
        check_text(text)
        return _first_object(text, required_key)
    except JSONBounds as exc:  # a nesting or digit bomb: an invalid answer, never a crash
        raise ProposalError([f"the answer cannot be read as JSON: {exc}; reply with one plain JSON object"],
                            text) from None


def _first_object(text: str, required_key: str) -> dict[str, Any]:
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    saw_object = False
    last_error = ""
    for chunk in candidates:
        stripped = chunk.strip()
        try:
            obj = loads(stripped)
            if isinstance(obj, dict):
                saw_object = True
                if required_key in obj:
                    return obj
        except json.JSONDecodeError as exc:
            last_error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        for m in re.finditer(r"\{", chunk):
            try:
                obj, _ = raw_decode(chunk, m.start())
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                saw_object = True
                if required_key in obj:
                    return obj
    detail = f" ({last_error})" if last_error else ""
    if f'"{required_key}"' in text:
        raise ProposalError([f"invalid or truncated JSON{detail}: reply with one complete JSON object"], text)
    if saw_object:
        raise ProposalError([f"no JSON object with a {required_key!r} field found"], text)
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


def table_dims(observation: ObservationDiscretizer) -> tuple[int, ...]:
    """Sizes of the dimensions a state is made of (their product is the number of states).

    A ``Box`` observation: its binned dimensions; a grid world: rows and columns; any other ``Discrete``
    observation: the single state index.
    """
    if isinstance(observation, BoxDiscretizer):
        return tuple(int(b) for b in observation.bins)
    if isinstance(observation, DiscreteDiscretizer) and observation.grid is not None:
        return (int(observation.grid[0]), int(observation.grid[1]))
    return (int(observation.n_states),)


def dim_names(observation: ObservationDiscretizer) -> list[str]:
    """Readable names of :func:`table_dims`."""
    if isinstance(observation, BoxDiscretizer):
        return [d.name for d in observation.dims]
    if len(table_dims(observation)) == 2:
        return ["row", "col"]
    return ["state index"]


# ---------------------------------------------------------------------------------------------------- schema bounds
ENUM_BUDGET = 1000
"""Most ``enum`` values one answer schema carries (OpenAI's strict structured output accepts 1,000 in a schema).

:func:`with_enums` spends it on the smallest integer ranges first; a range left without an ``enum`` keeps only
``minimum``/``maximum``, which llama.cpp's grammar converter does not enforce (the validator still does)."""
ENUM_LARGEST = 100
"""Largest range given as an ``enum``. Each value becomes one alternative of a grammar rule, and llama.cpp checks
the whole vocabulary against every alternative at the first digit: with Qwen2.5's 151,936 tokens one such step costs
about 2.3 ms of CPU per value (measured: 12 ms for an integer, 50 ms for an enum of 16 values, 750 ms for 324, 2.5 s
for 1,000, 6.2 s for 10,000; llama-cpp-python 0.3.36), while the 0.5B model itself took about 0.44 s of CPU a token
(prompt included, 2 busy cores). An enum of 100 values adds about one token's time to each value it bounds."""

_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def int_range(lo: int, hi: int) -> dict[str, Any]:
    """An integer in ``lo..hi`` (both included); :func:`with_enums` adds the ``enum`` that grammars enforce."""
    return {"type": "integer", "minimum": int(lo), "maximum": int(hi)}


def number_range(lo: float, hi: float) -> dict[str, Any]:
    """A number in ``[lo, hi]`` (an infinite bound is left out: JSON has no infinity)."""
    out: dict[str, Any] = {"type": "number"}
    if np.isfinite(lo):
        out["minimum"] = float(lo)
    if np.isfinite(hi):
        out["maximum"] = float(hi)
    return out


def _subschemas(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The schemas directly inside ``node`` (not the names of its properties)."""
    out: list[dict[str, Any]] = []
    for key, value in node.items():
        if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            out.extend(v for v in value.values() if isinstance(v, dict))
        elif key in _SUBSCHEMA and isinstance(value, dict):
            out.append(value)
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out.extend(v for v in value if isinstance(v, dict))
    return out


def with_enums(schema: dict[str, Any], budget: int = ENUM_BUDGET, largest: int = ENUM_LARGEST) -> dict[str, Any]:
    """``schema`` with an ``enum`` of every value on its integer ranges (``int_range``) of at most ``largest`` values,
    smallest range first, while the schema's enum values stay within ``budget``; ``minimum`` and ``maximum`` are
    kept beside them. In place.

    An ``enum`` is what grammar-constrained decoding enforces (llama.cpp's converter ignores integer bounds).
    """
    ranges: list[dict[str, Any]] = []
    used = 0
    stack = [schema]
    while stack:
        node = stack.pop()
        if "enum" in node:
            used += len(node["enum"])
        elif node.get("type") == "integer" and isinstance(node.get("minimum"), int) \
                and isinstance(node.get("maximum"), int):
            ranges.append(node)
        stack.extend(reversed(_subschemas(node)))
    for node in sorted(ranges, key=lambda n: n["maximum"] - n["minimum"]):  # stable: schema order among equals
        size = node["maximum"] - node["minimum"] + 1
        if size <= 0:
            continue
        if size > largest or used + size > budget:
            break
        node["enum"] = list(range(node["minimum"], node["maximum"] + 1))
        used += size
    return schema


def without_keywords(schema: dict[str, Any], keywords: set[str] | frozenset[str]) -> dict[str, Any]:
    """A copy of ``schema`` without the given keywords anywhere in it (property names are left alone).

    For a provider that refuses a keyword: ``without_keywords(schema, {"minimum", "maximum"})``. Every range the
    answer formats give carries ``minimum`` and ``maximum`` beside an ``enum``, so removing one kind keeps the other.
    """

    def strip(node: Any) -> Any:
        if not isinstance(node, dict):
            return copy.deepcopy(node)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in keywords:
                continue
            if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
                out[key] = {name: strip(v) for name, v in value.items()}
            elif key in _SUBSCHEMA and isinstance(value, dict):
                out[key] = strip(value)
            elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
                out[key] = [strip(v) for v in value]
            else:
                out[key] = copy.deepcopy(value)
        return out

    result: dict[str, Any] = strip(schema)
    return result
