"""``rules``: compact rules that compile into the table, for tables too big to write (or to show) row by row.

A rules answer is JSON with up to three parts::

    {"rationale": "short reason",
     "cases": [{"conditions": [{"dim": 1, "min_bin": 0, "max_bin": 0}], "action": 2}],
     "linear": [{"output": 0, "weights": [0.0, 1.2, -0.4], "bias": 0.1, "thresholds": [-0.3, 0.3],
                 "products": [{"dims": [1, 2], "weight": 0.8}]}],
     "otherwise": 1}

(``products`` is optional: each adds ``weight * x_i * x_j`` to its rule's score, at most :data:`MAX_PRODUCTS`.)

How rules decide a state -- the decision list of ``cases``, the ``levels``, ``scores`` and ``value`` forms of the
``linear`` rules, and when ``otherwise`` applies -- is the rule language of :mod:`.ruleset`; this module is the answer
that carries them: its models, its schema, its validator and its prompt section.

Schema bounds (:meth:`RulesFormat.json_schema`): cases as the ``edits`` format's boxes (bins per dimension, the
entry in range); a linear rule takes one of the shapes the actions allow -- per action dimension ``d`` of the levels
form, ``output`` d with exactly ``levels[d] - 1`` thresholds; in the scores form an ``output`` in ``0..n_actions-1``
with no thresholds; for ``Discrete`` actions the prompt and the schema ask for one form, :func:`asked_form` (the
spec's ``rules_form``, else levels up to 2 actions), and a repeated output of the scores form is left to the
validator; for values ``output`` 0 with none -- always with one weight per state dimension (``minItems`` =
``maxItems``), and at most one rule per output (``maxItems``). Each shape comes twice: without ``products`` and
with them (two dimensions in range each, at most :data:`MAX_PRODUCTS`), so that an answer without products fits as
before and strict modes, which want every property of an object required, take both. All four keys are required,
in the prompt's order (a llama.cpp grammar writes the required keys first, in the schema's order), and ``otherwise``
is never null: a schema cannot make it depend on ``linear`` being empty in what strict modes accept (no
``if``/``then``, no ``anyOf`` at the root), so it asks for an entry always. So the validator also takes answers the
schema does not: linear rules in the form not asked for, and answers that leave out ``cases`` or ``linear`` (taken as
``[]``) or give ``otherwise`` null or leave it out beside linear rules (old transcripts and the population search
write them), each of the latter equal to one the schema takes.

The table is compiled from the rules alone (the current table plays no part), and the rules travel with it as the
policy's ``source`` (:meth:`~.ruleset.RuleSet.to_dict`).

Any table can be written as rules: :meth:`RulesFormat.render` turns a plain table into a decision list of boxes of
equal entries (the most common entry as ``otherwise``), which is how the non-LLM proposers that produce tables answer
in this format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from ..discretize import ActionDiscretizer, BoxActions, DiscreteActions, MultiDiscreteActions, ObservationDiscretizer
from ..errors import ProposalError
from ..storage.templates import fill
from .base import (
    AnswerFormat,
    AnswerModel,
    FormatContext,
    Parsed,
    RefineOptions,
    Target,
    cap_errors,
    dim_names,
    extract_json_object,
    int_range,
    pydantic_errors,
    table_dims,
    with_enums,
)
from .edits import Edit, ValueEdit, _check, bound_boxes, describe_edit_dims
from .ruleset import RuleSet, feature_values, linear_form, output_levels, rules_text, table_as_rules
from .table import entry_fields

if TYPE_CHECKING:
    from ..envs.spec import EnvSpec

__all__ = [
    "Product",
    "LinearRule",
    "Case",
    "ValueCase",
    "RulesAnswer",
    "ValueRulesAnswer",
    "RulesFormat",
    "asked_form",
    "table_as_rules",
    "describe_rule_dims",
    "describe_outputs",
    "MAX_PRODUCTS",
]

MAX_PRODUCTS = 4
"""Products a linear rule may carry."""


class Product(BaseModel):
    """A product feature of a linear rule: ``weight * x_i * x_j``."""

    model_config = ConfigDict(extra="forbid")
    dims: list[StrictInt] = Field(description="the two state dimensions [i, j] multiplied (i = j: a square)")
    weight: StrictFloat = Field(description="the weight of x_i * x_j in the score")

class LinearRule(BaseModel):
    """A linear score over the scaled state dimensions."""

    model_config = ConfigDict(extra="forbid")
    output: StrictInt = Field(description="the action dimension this rule sets (levels form), or the action it scores "
                              "(scores form); 0 for a single rule")
    weights: list[StrictFloat] = Field(description="one weight per state dimension, in the order of the States section")
    bias: StrictFloat = Field(description="added to the weighted sum")
    thresholds: list[StrictFloat] = Field(description="ascending cut points between consecutive levels (levels - 1 "
                                          "of them); [] in the scores form and for values")
    products: list[Product] = Field(default_factory=list, description="optional products of two state dimensions, "
                                    "each adding weight * x_i * x_j to the score")

    def rule(self) -> dict[str, Any]:
        """The rule as plain data; ``products`` only when there are some (so a rule without them is as before)."""
        out = self.model_dump()
        if not out["products"]:
            del out["products"]
        return out


class Case(Edit):
    """A case of the decision list: ``action`` for the states matching all conditions (the first match decides)."""


class ValueCase(ValueEdit):
    """A case of the decision list: ``value`` for the states matching all conditions (the first match decides)."""


class RulesAnswer(AnswerModel):
    """Rules that compile into the whole table."""

    cases: list[Case] = Field(default_factory=list, description="ordered decision list: the first case whose "
                              "conditions all hold decides the state")
    linear: list[LinearRule] = Field(default_factory=list, description="linear rules for the states no case matches")
    otherwise: StrictInt | None = Field(default=None, description="the action of the states no case matches, when "
                                        "linear is empty (else null)")


class ValueRulesAnswer(AnswerModel):
    """Rules that compile into the whole table of values."""

    cases: list[ValueCase] = Field(default_factory=list, description="ordered decision list: the first case whose "
                                   "conditions all hold decides the state")
    linear: list[LinearRule] = Field(default_factory=list, description="one linear rule for the states no case "
                                     "matches (value = score, clipped to the range)")
    otherwise: StrictFloat | None = Field(default=None, description="the value of the states no case matches, when "
                                          "linear is empty (else null)")


# ---------------------------------------------------------------------------------------------------- checks
def _check_linear(rules: list[LinearRule], n_dims: int, actions: ActionDiscretizer, target: Target) -> list[str]:
    errors: list[str] = []
    if not rules:
        return errors
    for i, r in enumerate(rules):
        where = f"linear[{i}]"
        if len(r.weights) != n_dims:
            errors.append(f"{where}: give {n_dims} weights (one per state dimension), got {len(r.weights)}")
        if not all(np.isfinite(x) for x in [*r.weights, r.bias, *r.thresholds]):
            errors.append(f"{where}: weights, bias and thresholds must be finite numbers")
        if any(b < a for a, b in zip(r.thresholds, r.thresholds[1:], strict=False)):
            errors.append(f"{where}: thresholds must be ascending, got {r.thresholds}")
        errors += _check_products(r.products, n_dims, where)
    if errors:
        return errors
    outputs = [r.output for r in rules]
    if len(set(outputs)) != len(outputs):
        errors.append(f"linear: each output at most once, got outputs {outputs}")
    form = linear_form(actions, target, [r.model_dump() for r in rules])
    if form == "value":
        if len(rules) != 1 or rules[0].output != 0 or rules[0].thresholds:
            errors.append("linear: for values give one rule with output 0 and thresholds []")
        return errors
    if form == "scores":
        for i, r in enumerate(rules):
            if not 0 <= r.output < actions.n_actions:
                errors.append(f"linear[{i}]: output {r.output} out of range 0..{actions.n_actions - 1} (scores form: "
                              "output is the action scored)")
        return errors
    sizes = output_levels(actions)
    names = _output_names(actions)
    for i, r in enumerate(rules):
        if not 0 <= r.output < len(sizes):
            errors.append(f"linear[{i}]: output {r.output} out of range 0..{len(sizes) - 1} (the action dimensions)")
            continue
        need = sizes[r.output] - 1
        if len(r.thresholds) != need:
            errors.append(f"linear[{i}]: output {r.output} ({names[r.output]}) has {sizes[r.output]} levels: give "
                          f"{need} ascending thresholds, got {len(r.thresholds)}"
                          + ("; or thresholds [] in every rule (scores form)" if len(sizes) == 1 else ""))
    missing = sorted(set(range(len(sizes))) - set(outputs))
    if missing and not errors:
        errors.append(f"linear: no rule for output {', '.join(str(m) for m in missing)} "
                      f"({', '.join(names[m] for m in missing)}); give one rule per action dimension")
    return errors


def _check_products(products: list[Product], n_dims: int, where: str) -> list[str]:
    errors = []
    if len(products) > MAX_PRODUCTS:
        errors.append(f"{where}: at most {MAX_PRODUCTS} products, got {len(products)}")
    for k, p in enumerate(products):
        if len(p.dims) != 2 or not all(0 <= d < n_dims for d in p.dims):
            errors.append(f"{where}.products[{k}]: dims must be two state dimensions in 0..{n_dims - 1}, got "
                          f"{p.dims}")
        if not np.isfinite(p.weight):
            errors.append(f"{where}.products[{k}]: weight must be a finite number, got {p.weight}")
    return errors


_OTHERWISE = ("the entry of the states no case matches, when linear is empty (ignored when linear rules decide them, "
              "but always given)")


def _linear_schema(actions: ActionDiscretizer, target: Target, n_dims: int, rule: dict[str, Any],
                   product_props: dict[str, Any], base: dict[str, Any], form: str) -> dict[str, Any]:
    """The schema of ``linear`` (``base``: its pydantic schema) in ``form``: the rule shapes it allows, each with its
    ``output`` and exactly its number of thresholds, at most one rule per output; each shape without and with
    ``products`` (``product_props``: the pydantic properties of :class:`Product`).

    Levels form: per action dimension ``d``, ``output`` d with ``levels[d] - 1`` thresholds. Scores form
    (``Discrete`` actions): any action, no thresholds. Values: one rule, ``output`` 0, no thresholds.
    """
    numbers = {"type": "array", "items": {"type": "number"}}

    product = {"type": "object", "properties": {
        "dims": {**product_props["dims"], "type": "array", "items": {"type": "integer", **int_range(0, n_dims - 1)},
                 "minItems": 2, "maxItems": 2},
        "weight": product_props["weight"]}, "required": ["dims", "weight"], "additionalProperties": False}

    def shape(lo: int, hi: int, n_thresholds: int) -> dict[str, Any]:
        props = {"output": {**rule["output"], **int_range(lo, hi)},
                 "weights": {**rule["weights"], **numbers, "minItems": n_dims, "maxItems": n_dims},
                 "bias": rule["bias"],
                 "thresholds": {**rule["thresholds"], **numbers, "minItems": n_thresholds, "maxItems": n_thresholds}}
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}

    def with_products(plain: dict[str, Any]) -> dict[str, Any]:
        props = {**plain["properties"], "products": {"description": rule["products"]["description"],
                                                     "type": "array", "items": product, "maxItems": MAX_PRODUCTS}}
        return {**plain, "properties": props, "required": list(props)}

    def rules(plain: list[dict[str, Any]], most: int) -> dict[str, Any]:
        return {"type": "array", "items": {"anyOf": plain + [with_products(s) for s in plain]}, "maxItems": most}

    keep = {k: v for k, v in base.items() if k in ("title", "description", "default")}
    if target.kind == "value":
        return {**keep, **rules([shape(0, 0, 0)], 1)}
    if form == "scores":
        return {**keep, **rules([shape(0, actions.n_actions - 1, 0)], actions.n_actions)}
    levels = output_levels(actions)
    return {**keep, **rules([shape(d, d, n - 1) for d, n in enumerate(levels)], len(levels))}


def asked_form(actions: ActionDiscretizer, spec: EnvSpec | None) -> str:
    """The form a rules answer is asked for (prompt and schema): ``levels``, or for ``Discrete`` actions the spec's
    ``rules_form``, else ``levels`` up to 2 actions and ``scores`` above (the validator takes either)."""
    if not isinstance(actions, DiscreteActions):
        return "levels"
    if spec is not None and spec.rules_form:
        return spec.rules_form
    return "levels" if actions.n_actions <= 2 else "scores"


def _output_names(actions: ActionDiscretizer) -> list[str]:
    if isinstance(actions, (BoxActions, MultiDiscreteActions)):
        return list(actions.names)
    return ["action"]


# ---------------------------------------------------------------------------------------------------- format
class RulesFormat(AnswerFormat[np.ndarray]):
    """``rules``: a decision list and linear rules that compile into the table."""

    name = "rules"
    shows_table = False  # a big table cannot be printed: the prompt shows the rules (current_text)
    summarises_evidence = True
    refinable = True
    Options = RefineOptions

    def _model(self, target: Target) -> type[BaseModel]:
        return RulesAnswer if target.kind == "action" else ValueRulesAnswer

    def json_schema(self, ctx: FormatContext) -> dict[str, Any]:
        """The answer's schema with the validator's bounds (cases as in ``edits``, linear rules per output, a required
        ``otherwise``); see the module docstring."""
        target = ctx.target
        schema = self._model(target).model_json_schema()
        bound_boxes(schema, "Case" if target.kind == "action" else "ValueCase", ctx)
        rule = schema["$defs"].pop("LinearRule")["properties"]
        product = schema["$defs"].pop("Product")["properties"]
        props = schema["properties"]
        props["linear"] = _linear_schema(ctx.actions, target, len(table_dims(ctx.observation)), rule, product,
                                         props["linear"], asked_form(ctx.actions, ctx.spec))
        other = schema["properties"]["otherwise"]
        schema["properties"]["otherwise"] = {**target.json_schema(), "description": _OTHERWISE, "title": other["title"]}
        schema["required"] = list(props)  # in the order of the prompt's shape: a grammar writes them so
        return with_enums(schema)

    def prompt_section(self, ctx: FormatContext) -> str:
        return fill("format_rules.md", n_dims=len(table_dims(ctx.observation)),
                    dims="\n".join(describe_rule_dims(ctx.observation)),
                    outputs="\n".join(describe_outputs(ctx.actions, ctx.target, asked_form(ctx.actions, ctx.spec))),
                    max_state=ctx.n_states - 1, max_products=MAX_PRODUCTS,
                    **entry_fields(ctx.target))

    def parse(self, text: str, ctx: FormatContext) -> Parsed[np.ndarray]:
        """Validate a rules answer and compile it into the whole table (``source``: the rules)."""
        target = ctx.target
        obj = _rules_object(text)
        try:
            answer: Any = self._model(target).model_validate(obj)
        except ValidationError as exc:
            raise ProposalError(pydantic_errors(exc), text) from None
        sizes = table_dims(ctx.observation)
        errors = [e.replace("edits[", "cases[") for e in _check(answer.cases, sizes, dim_names(ctx.observation),
                                                                   target)]
        errors += _check_linear(answer.linear, len(sizes), ctx.actions, target)
        if answer.otherwise is not None and (why := target.check(answer.otherwise)):
            errors.append(f"otherwise: {why}")
        if not answer.linear and answer.otherwise is None:
            errors.append(f"give linear rules or an \"otherwise\" {target.field} for the states no case matches")
        if errors:
            raise ProposalError(cap_errors(errors), text)
        rules = RuleSet([c.model_dump() for c in answer.cases], [r.rule() for r in answer.linear], answer.otherwise)
        table, clipped = rules.compile_with_notes(ctx.observation, ctx.actions, target)
        current = target.array(ctx.current).reshape(-1)
        notes = []
        if answer.linear and answer.otherwise is not None:
            notes.append("otherwise ignored: the linear rules decide the states no case matches")
        if clipped:
            notes.append(f"{clipped} linear values clipped to [{target.low:g}, {target.high:g}]")
        return Parsed(table, answer.rationale, int(np.sum(table != current)), notes, rules.to_dict())

    def render(self, value: np.ndarray | RuleSet, ctx: FormatContext, rationale: str) -> str:
        """A :class:`RuleSet` as answer text, or a table as a decision list that compiles back to exactly it."""
        if isinstance(value, RuleSet):
            return value.to_json(rationale)
        return table_as_rules(np.asarray(value), ctx.observation, ctx.target).to_json(rationale)

    def current_text(self, table: np.ndarray, observation: ObservationDiscretizer, target: Target, budget: int,
                     size: Callable[[str], int], source: Mapping[str, Any] | None = None) -> str:
        """The rules the table was compiled from, or a decision list equal to it (:func:`~.ruleset.rules_text`)."""
        return rules_text(table, observation, target, budget, size, source)


def _rules_object(text: str) -> dict[str, Any]:
    """The first JSON object of the answer holding any of the rules' keys."""
    last: ProposalError | None = None
    for key in ("linear", "cases", "otherwise"):
        try:
            return extract_json_object(text, key)
        except ProposalError as exc:
            last = exc
    assert last is not None
    if "no JSON object with" in last.errors[0]:
        raise ProposalError(['no JSON object with "cases", "linear" or "otherwise" found'], text) from None
    raise last


def describe_rule_dims(observation: ObservationDiscretizer) -> list[str]:
    """One line per dimension: its bins and the scaled value ``x`` of each bin's centre."""
    lines = []
    for line, xs in zip(describe_edit_dims(observation), feature_values(observation), strict=True):
        shown = " ".join(f"{x:+.2f}" for x in xs) if len(xs) <= 12 else \
            f"{xs[0]:+.3f} .. {xs[-1]:+.3f} in even steps"
        lines.append(f"{line}; x = {shown}")
    return lines


def describe_outputs(actions: ActionDiscretizer, target: Target, form: str = "") -> list[str]:
    """One line per output a linear rule can set (for ``Discrete`` actions in ``form``, or both forms)."""
    if target.kind == "value":
        return [f"output 0 = the value ({target.describe()}): one rule, thresholds [], value = score (clipped)"]
    names = _output_names(actions)
    if isinstance(actions, BoxActions):
        return [f"output {d} = {names[d]}: {len(v)} levels "
                + " ".join(f"{k}={x:.3g}" for k, x in enumerate(v)) + f" -> {len(v) - 1} thresholds"
                for d, v in enumerate(actions.values)]
    if isinstance(actions, MultiDiscreteActions):
        return [f"output {d} = {names[d]}: levels 0..{int(n) - 1} -> {int(n) - 1} thresholds"
                for d, n in enumerate(actions.nvec)]
    n = actions.n_actions
    levels = f"output 0 = the action in index order 0..{n - 1} -> {n - 1} thresholds (levels form)"
    scores = "one rule per action, output = the action, thresholds [] (scores form: the highest score acts)"
    if form == "levels":
        return [levels + ": one rule"]
    if form == "scores":
        return [scores[0].upper() + scores[1:] + f", each action 0..{n - 1} at most once"]
    return [f"{levels}; or {scores}"]
