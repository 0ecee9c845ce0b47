"""Answer schemas carry the bounds their validators enforce, in forms that grammars and strict modes accept.

For every registered table format and several specs: (a) every answer the validator accepts validates against the
format's JSON schema (rendered tables, random valid answers, and random mutations of them that the validator still
accepts); (b) answers out of bounds are refused by both. Then which keywords llama.cpp's grammar converter (the one
``llama_cpp.server`` and the in-process backend use) really enforces, and what the schemas become in it.
"""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import jsonschema
import numpy as np
import pytest

from llm_policy_gen.clients.anthropic import to_anthropic_schema
from llm_policy_gen.clients.gemini import gemini_json_schema
from llm_policy_gen.clients.openai import _strict_schema
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import ProposalError
from llm_policy_gen.formats import make_format, table_format_names
from llm_policy_gen.formats.base import (
    ENUM_BUDGET,
    FormatContext,
    Target,
    table_dims,
    with_enums,
    without_keywords,
)
from llm_policy_gen.formats.rules import asked_form
from llm_policy_gen.formats.ruleset import linear_form, output_levels

SPECS = ["FrozenLake-v1", "CartPole-v1", "Hopper-v5", "Pendulum-v1", "Taxi-v4"]
"""A grid world, CartPole (rules answers in the issue), Box actions in levels, a continuous-action task, and a single
``Discrete`` state index."""
BIG = "BipedalWalker-v3"
"""10,000 states, 81 actions: more than the enum budget."""


def fctx(env_id: str, value: bool = False) -> FormatContext:
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    if value:
        return FormatContext(obs, acts, np.zeros(obs.n_states), Target("value", low=-5.0, high=5.0), spec)
    return FormatContext(obs, acts, spec.default_table(), Target("action", n_actions=acts.n_actions), spec)


def accepts(fmt: Any, obj: dict[str, Any], ctx: FormatContext) -> bool:
    try:
        fmt.parse(json.dumps(obj), ctx)
    except ProposalError:
        return False
    return True


def schema_errors(schema: dict[str, Any], obj: Any) -> list[str]:
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]


# ---------------------------------------------------------------------------------------------------- valid answers
def entry(rng: np.random.Generator, target: Target) -> int | float:
    if target.kind == "action":
        return int(rng.integers(target.n_actions))
    return round(float(rng.uniform(target.low, target.high)), 3)


def box(rng: np.random.Generator, sizes: tuple[int, ...], target: Target) -> dict[str, Any]:
    dims = rng.permutation(len(sizes))[: int(rng.integers(0, len(sizes) + 1))]
    conditions = []
    for d in dims:
        lo, hi = sorted(int(x) for x in rng.integers(0, sizes[d], 2))
        conditions.append({"dim": int(d), "min_bin": lo, "max_bin": hi})
    return {"conditions": conditions, target.field: entry(rng, target)}


def linear_rules(rng: np.random.Generator, ctx: FormatContext, form: str) -> list[dict[str, Any]]:
    n_dims = len(table_dims(ctx.observation))

    def rule(output: int, n_thresholds: int) -> dict[str, Any]:
        return {"output": output, "weights": [round(float(w), 3) for w in rng.normal(size=n_dims)],
                "bias": round(float(rng.normal()), 3),
                "thresholds": sorted(round(float(t), 3) for t in rng.normal(size=n_thresholds))}

    if form == "value":
        return [rule(0, 0)]
    if form == "scores":
        actions = rng.permutation(ctx.actions.n_actions)[: int(rng.integers(1, ctx.actions.n_actions + 1))]
        return [rule(int(a), 0) for a in actions]
    return [rule(d, n - 1) for d, n in enumerate(output_levels(ctx.actions))]


def random_answer(rng: np.random.Generator, name: str, ctx: FormatContext) -> dict[str, Any]:
    """A random answer the validator accepts (asserted by the callers)."""
    target, sizes = ctx.target, table_dims(ctx.observation)
    if name == "table":
        states = rng.integers(0, ctx.n_states, int(rng.integers(1, min(40, ctx.n_states) + 1)))
        return {"rationale": "r", "rows": [{"state": int(s), target.field: entry(rng, target)} for s in states]}
    if name == "edits":
        return {"rationale": "r", "edits": [box(rng, sizes, target) for _ in range(int(rng.integers(1, 5)))]}
    if name == "decisions":
        boxes = [box(rng, sizes, target) for _ in range(int(rng.integers(0, 5)))]
        return {"rationale": "r", "decisions": [{"when": b["conditions"], "then": b[target.field]} for b in boxes],
                "default": entry(rng, target)}
    assert name == "rules", name
    asked = "value" if target.kind == "value" else asked_form(ctx.actions, ctx.spec)
    form = ["none", asked][int(rng.integers(2))]
    answer: dict[str, Any] = {"rationale": "r", "otherwise": entry(rng, target)}
    if rng.random() < 0.7:
        answer["cases"] = [box(rng, sizes, target) for _ in range(int(rng.integers(0, 4)))]
    if form != "none":
        answer["linear"] = linear_rules(rng, ctx, form)
    return answer


def integer_leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in integer_leaves(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in integer_leaves(v, (*path, i))]
    return [path] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


def lists(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if isinstance(node, list) else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    return out + [p for k, v in items for p in lists(v, (*path, k))]


def at(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def mutate(rng: np.random.Generator, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with one number moved (often out of range) or one list item dropped or repeated."""
    out = copy.deepcopy(answer)
    leaves, arrays = integer_leaves(out), [p for p in lists(out) if at(out, p)]
    if leaves and (not arrays or rng.random() < 0.7):
        path = leaves[int(rng.integers(len(leaves)))]
        old = at(out, path)
        new = int(rng.integers(-2, 2 * abs(int(old)) + 4)) if isinstance(old, int) else float(rng.normal(0, 10))
        at(out, path[:-1])[path[-1]] = new
    elif arrays:
        items = at(out, arrays[int(rng.integers(len(arrays)))])
        i = int(rng.integers(len(items)))
        if rng.random() < 0.5:
            del items[i]
        else:
            items.append(copy.deepcopy(items[i]))
    return out


def completed(name: str, answer: dict[str, Any], ctx: FormatContext) -> dict[str, Any]:
    """``answer`` as the schema asks for it, with the same table: a table answer's rows one per state (the last row
    of each); a rules answer's ``cases`` and ``linear`` written out (``[]``), and an ``otherwise`` (any entry: linear
    rules decide) for one null or absent beside linear rules, all four keys in the prompt's order (see the format
    modules' docstrings)."""
    if name == "table":  # one row per state, as the last row of a state counts
        last = {row["state"]: row for row in answer["rows"]}
        return {**answer, "rows": list(last.values())}
    if name != "rules":
        return answer
    out = {"rationale": answer.get("rationale"), "cases": answer.get("cases", []), "linear": answer.get("linear", []),
           "otherwise": answer.get("otherwise")}
    if out["otherwise"] is None and out["linear"]:
        out["otherwise"] = ctx.target.json_schema().get("minimum", 0)
    return out


def in_asked_form(name: str, answer: dict[str, Any], ctx: FormatContext) -> bool:
    """False for a rules answer whose linear rules are in the form the task is not asked for (the validator takes
    it, the schema does not: see ``test_discrete_actions_are_asked_for_one_form_of_linear_rules``)."""
    if name != "rules" or ctx.target.kind == "value" or not answer.get("linear"):
        return True
    return linear_form(ctx.actions, ctx.target, answer["linear"]) == asked_form(ctx.actions, ctx.spec)


CASES = [(name, env, value) for name in table_format_names() for env in SPECS for value in (False, True)
         if not value or env == "CartPole-v1"]


@pytest.mark.parametrize(("name", "env_id", "value"), CASES)
def test_every_answer_the_validator_accepts_fits_the_schema(name: str, env_id: str, value: bool) -> None:
    fmt, ctx = make_format(name), fctx(env_id, value)
    schema = fmt.json_schema(ctx)
    jsonschema.Draft202012Validator.check_schema(schema)
    rng = np.random.default_rng(18)
    tables = [ctx.current]
    if ctx.n_states <= 500:  # a random table of a bigger task renders to thousands of boxes
        tables.append(ctx.target.array([entry(rng, ctx.target) for _ in range(ctx.n_states)]))
    rendered = [json.loads(fmt.render(t, ctx, "rendered")) for t in tables]
    answers = [random_answer(rng, name, ctx) for _ in range(30)]
    for answer in rendered + answers:
        assert accepts(fmt, answer, ctx), answer
        full = completed(name, answer, ctx)
        assert schema_errors(schema, full) == [], answer
        assert np.array_equal(fmt.parse(json.dumps(full), ctx).value, fmt.parse(json.dumps(answer), ctx).value)
    accepted_mutants = refused_mutants = 0
    for i in range(300):
        mutant = mutate(rng, answers[i % len(answers)])
        if accepts(fmt, mutant, ctx) and in_asked_form(name, mutant, ctx):
            accepted_mutants += 1
            assert schema_errors(schema, completed(name, mutant, ctx)) == [], mutant
        elif schema_errors(schema, mutant):
            refused_mutants += 1
    assert accepted_mutants > 30 and refused_mutants > 30, (accepted_mutants, refused_mutants)


OUT_OF_BOUNDS: list[tuple[str, str, dict[str, Any]]] = [
    ("table", "FrozenLake-v1", {"rationale": "r", "rows": [{"state": 0, "action": 24}]}),
    ("table", "FrozenLake-v1", {"rationale": "r", "rows": [{"state": 1376, "action": 1}]}),
    ("table", "FrozenLake-v1", {"rationale": "r", "rows": [{"state": -1, "action": 1}]}),
    ("table", "FrozenLake-v1", {"rationale": "r", "rows": []}),
    ("table", "Hopper-v5", {"rationale": "r", "rows": [{"state": 384, "action": 0}]}),
    ("table", "Hopper-v5", {"rationale": "r", "rows": [{"state": 383, "action": 27}]}),
    ("edits", "FrozenLake-v1", {"rationale": "r", "edits": []}),
    ("edits", "FrozenLake-v1", {"rationale": "r", "edits": [{"conditions": [], "action": 4}]}),
    ("edits", "FrozenLake-v1",
     {"rationale": "r", "edits": [{"conditions": [{"dim": 2, "min_bin": 0, "max_bin": 0}], "action": 0}]}),
    ("edits", "CartPole-v1",  # dim 0 has 3 bins, dim 2 has 6
     {"rationale": "r", "edits": [{"conditions": [{"dim": 0, "min_bin": 0, "max_bin": 5}], "action": 0}]}),
    ("edits", "CartPole-v1", {"rationale": "r", "edits": [{"conditions": [
        {"dim": d, "min_bin": 0, "max_bin": 0} for d in (0, 1, 2, 3, 0)], "action": 0}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "cases": [], "linear": [], "otherwise": None}),
    ("rules", "CartPole-v1", {"rationale": "r", "cases": [], "linear": []}),
    ("rules", "CartPole-v1", {"rationale": "r", "cases": [], "linear": [], "otherwise": 2}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": 0, "weights": [1.0, 0.5, 2.0], "bias": 0.0, "thresholds": [0.0]}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": 0, "weights": [1.0, 0.5], "bias": 0.0, "thresholds": [0.0]}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": 2, "weights": [1.0, 0.5, 2.0, 1.0], "bias": 0.0, "thresholds": []}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": 0, "weights": [1.0, 0.5, 2.0, 1.0], "bias": 0.0, "thresholds": [-1.0, 0.0]}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "cases": [
        {"conditions": [{"dim": 1, "min_bin": 3, "max_bin": 3}], "action": 1}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "cases": [
        {"conditions": [{"dim": 4, "min_bin": 0, "max_bin": 0}], "action": 1}]}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "cases": [{"conditions": [], "action": 5}]}),
    ("rules", "Hopper-v5", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": d, "weights": [0.0] * 4, "bias": 0.0, "thresholds": [0.0]} for d in range(3)]}),
    ("rules", "Hopper-v5", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": d, "weights": [0.0] * 4, "bias": 0.0, "thresholds": [0.0, 1.0]} for d in (0, 1, 3)]}),
    ("rules", "Hopper-v5", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": d % 3, "weights": [0.0] * 4, "bias": 0.0, "thresholds": [0.0, 1.0]} for d in range(4)]}),
    ("rules", "Pendulum-v1", {"rationale": "r", "otherwise": 3}),
    ("rules", "CartPole-v1", {"rationale": "r", "otherwise": 0, "linear": [  # the levels and scores forms mixed
        {"output": 0, "weights": [1.0, 0.5, 2.0, 1.0], "bias": 0.0, "thresholds": [0.0]},
        {"output": 1, "weights": [1.0, 0.5, 2.0, 1.0], "bias": 0.0, "thresholds": []}]}),
    ("rules", "FrozenLake-v1", {"rationale": "r", "otherwise": 0, "linear": [
        {"output": 2, "weights": [1.0, 0.5], "bias": 0.0, "thresholds": []},
        {"output": 0, "weights": [1.0, 0.5], "bias": 0.0, "thresholds": [-1.0, 0.0, 1.0]}]}),
]


@pytest.mark.parametrize(("name", "env_id", "answer"), OUT_OF_BOUNDS)
def test_answers_out_of_bounds_are_refused_by_schema_and_validator(name: str, env_id: str,
                                                                   answer: dict[str, Any]) -> None:
    fmt, ctx = make_format(name), fctx(env_id)
    assert not accepts(fmt, answer, ctx)
    assert schema_errors(fmt.json_schema(ctx), completed(name, answer, ctx))  # for its bounds, not a missing key


@pytest.mark.parametrize("name", ["table", "edits", "rules"])
def test_values_out_of_range_are_refused_by_the_schema(name: str) -> None:
    fmt, ctx = make_format(name), fctx("CartPole-v1", value=True)
    answer = {"table": {"rationale": "r", "rows": [{"state": 0, "value": 7.5}]},
              "edits": {"rationale": "r", "edits": [{"conditions": [], "value": -5.5}]},
              "rules": {"rationale": "r", "otherwise": 5.01}}[name]
    assert not accepts(fmt, answer, ctx) and schema_errors(fmt.json_schema(ctx), completed(name, answer, ctx))
    if name == "rules":
        two = {"rationale": "r", "cases": [], "otherwise": 0.0, "linear": [
            {"output": 0, "weights": [0.0] * 4, "bias": 0.0, "thresholds": []} for _ in range(2)]}
        assert not accepts(fmt, two, ctx) and schema_errors(fmt.json_schema(ctx), two)


def test_rules_schema_asks_for_every_key_and_an_otherwise() -> None:
    """What the validator fills in, the schema asks for: ``cases`` and ``linear`` (``[]`` when left out) and an
    ``otherwise`` even beside linear rules (which ignore it), so that a grammar writes the keys in the prompt's order;
    the answer written out in full gives the same table."""
    fmt, ctx = make_format("rules"), fctx("CartPole-v1")
    schema = fmt.json_schema(ctx)
    assert schema["required"] == ["rationale", "cases", "linear", "otherwise"] == list(schema["properties"])
    rule = {"output": 0, "weights": [0.0, 0.0, 1.0, 1.0], "bias": 0.0, "thresholds": [0.0]}
    short = [{"rationale": "r", "linear": [rule], "otherwise": None}, {"rationale": "r", "linear": [rule]},
             {"rationale": "r", "otherwise": 1}, {"rationale": "r", "cases": [], "otherwise": 0}]
    for answer in short:
        full = completed("rules", answer, ctx)
        assert accepts(fmt, answer, ctx) and schema_errors(schema, answer)
        assert schema_errors(schema, full) == []
        assert fmt.parse(json.dumps(full), ctx).value.tolist() == fmt.parse(json.dumps(answer), ctx).value.tolist()


@pytest.mark.parametrize(("env_id", "asked"), [("CartPole-v1", "levels"), ("FrozenLake-v1", "scores"),
                                              ("Acrobot-v1", "levels"), ("LunarLander-v3", "scores")])
def test_discrete_actions_are_asked_for_one_form_of_linear_rules(env_id: str, asked: str) -> None:
    """The prompt and the schema ask for the task's form only (a levels rule and scores rules in one list are
    refused, and in the scores form a repeated output, which no schema of the strict subset can refuse, is the only
    hole); the validator still takes either form, so older answers parse as before."""
    fmt, ctx = make_format("rules"), fctx(env_id)
    assert asked_form(ctx.actions, ctx.spec) == asked
    schema, section = fmt.json_schema(ctx), fmt.prompt_section(ctx)
    assert f"({asked} form" in section and ("(levels form" in section) == (asked == "levels")
    assert ("(scores form" in section) == (asked == "scores")
    rng = np.random.default_rng(3)
    other = {"rationale": "r", "cases": [], "otherwise": 0,
             "linear": linear_rules(rng, ctx, "scores" if asked == "levels" else "levels")}
    assert accepts(fmt, other, ctx) and schema_errors(schema, other)
    for _ in range(10):
        mine = {"rationale": "r", "cases": [], "otherwise": 0, "linear": linear_rules(rng, ctx, asked)}
        assert accepts(fmt, mine, ctx) and schema_errors(schema, mine) == []
    if asked == "scores":
        twice = {**mine, "linear": [mine["linear"][0]] * 2}
        assert not accepts(fmt, twice, ctx) and schema_errors(schema, twice) == []


# ------------------------------------------------------------------------------------------------ enums and keywords
def enum_values(node: Any) -> int:
    if isinstance(node, dict):
        own = node.get("enum")
        return (len(own) if isinstance(own, list) else 0) + sum(enum_values(v) for k, v in node.items()
                                                                  if not isinstance(v, list) or k != "enum")
    if isinstance(node, list):
        return sum(enum_values(v) for v in node)
    return 0


def objects(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object":
            found.append(node)
        for k, v in node.items():
            if k not in ("enum", "default"):
                found += objects(v)
    elif isinstance(node, list):
        for v in node:
            found += objects(v)
    return found


KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "anyOf", "enum", "minimum", "maximum",
            "minItems", "maxItems", "description", "title", "$defs", "$ref", "default"}


@pytest.mark.parametrize("env_id", [*SPECS, BIG, "BipedalWalker-v3.rich"])
@pytest.mark.parametrize("name", ["table", "edits", "rules"])
def test_schemas_stay_in_what_strict_modes_accept(name: str, env_id: str) -> None:
    schema = make_format(name).json_schema(fctx(env_id))
    assert schema["type"] == "object" and "anyOf" not in schema
    assert enum_values(schema) <= ENUM_BUDGET
    for obj in objects(schema):  # OpenAI's strict mode: every object closed, every property required
        assert obj["additionalProperties"] is False
        if obj is not schema:
            assert sorted(obj["required"]) == sorted(obj["properties"])

    def keywords(node: Any) -> set[str]:
        if isinstance(node, list):
            return set().union(*(keywords(v) for v in node)) if node else set()
        if not isinstance(node, dict):
            return set()
        found = set(node) - {"enum", "default"}
        for k, v in node.items():
            if k in ("properties", "$defs"):
                found |= keywords(list(v.values()))
            elif k in ("items", "anyOf", "additionalProperties"):
                found |= keywords(v)
        return found

    assert keywords(schema) <= KEYWORDS, keywords(schema) - KEYWORDS
    strict = _strict_schema(schema)
    assert strict["properties"].keys() == schema["properties"].keys()
    assert json.dumps(gemini_json_schema(schema, "x")).count('"enum"') == json.dumps(schema).count('"enum"')
    anthropic = to_anthropic_schema(schema, "x")
    assert enum_values(anthropic) == enum_values(schema)


def test_table_rows_are_one_per_state_where_llama_cpp_takes_the_bound() -> None:
    """A grammar-constrained model cannot list rows until its context is full; llama.cpp refuses the grammar of a
    bound above about 1,000 (1,500 measured), so a bigger table goes without."""
    fmt, ctx = make_format("table"), fctx("FrozenLake-v1")
    schema = fmt.json_schema(ctx)
    assert schema["properties"]["rows"]["maxItems"] == 16
    assert "maxItems" not in make_format("table").json_schema(fctx(BIG))["properties"]["rows"]
    again = {"rationale": "r", "rows": [{"state": s % 16, "action": s // 16} for s in range(20)]}
    assert accepts(fmt, again, ctx) and schema_errors(schema, again)
    once = completed("table", again, ctx)
    assert len(once["rows"]) == 16 and schema_errors(schema, once) == []
    assert fmt.parse(json.dumps(once), ctx).value.tolist() == fmt.parse(json.dumps(again), ctx).value.tolist()


def test_small_ranges_get_enums_first_within_the_budget() -> None:
    big = make_format("table").json_schema(fctx(BIG))
    row = big["$defs"]["ActionRow"]["properties"]
    assert "enum" not in row["state"] and (row["state"]["minimum"], row["state"]["maximum"]) == (0, 9999)
    assert row["action"]["enum"] == list(range(81))
    cart = make_format("table").json_schema(fctx("CartPole-v1"))["$defs"]["ActionRow"]["properties"]
    assert "enum" not in cart["state"] and cart["state"]["maximum"] == 323 and cart["action"]["enum"] == [0, 1]
    lake = make_format("table").json_schema(fctx("FrozenLake-v1.8x8"))["$defs"]["ActionRow"]["properties"]
    assert lake["state"]["enum"] == list(range(64))
    schema = {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "integer", "minimum": 0, "maximum": 2},
        "c": {"type": "integer", "minimum": 1, "maximum": 1}}}
    with_enums(schema, budget=5)
    assert [schema["properties"][k].get("enum") for k in "abc"] == [None, [0, 1, 2], [1]]
    with_enums(schema, largest=9)
    assert "enum" not in schema["properties"]["a"]
    assert with_enums(schema, largest=10)["properties"]["a"]["enum"] == list(range(10))
    assert Target("value", low=-np.inf, high=2.5).json_schema() == {"type": "number", "maximum": 2.5}
    assert with_enums({"type": "integer", "minimum": 0, "maximum": -1}) == {"type": "integer", "minimum": 0,
                                                                            "maximum": -1}


def test_without_keywords_removes_keywords_not_property_names() -> None:
    schema = make_format("rules").json_schema(fctx("CartPole-v1"))
    schema["properties"]["enum"] = {"type": "integer", "minimum": 0, "maximum": 3}
    before = json.dumps(schema)
    plain = without_keywords(schema, {"minimum", "maximum"})
    assert json.dumps(schema) == before  # a copy
    text = json.dumps(plain)
    assert '"minimum"' not in text and '"maximum"' not in text and "enum" in plain["properties"]
    assert enum_values(plain) == enum_values(schema)  # the enums stay and still bound the answer
    bad = {"rationale": "r", "cases": [], "linear": [], "otherwise": 2}
    assert schema_errors(plain, bad)
    no_enum = without_keywords(schema, frozenset({"enum"}))
    assert enum_values(no_enum) == 0 and schema_errors(no_enum, bad)  # minimum/maximum stay
    assert schema_errors(without_keywords(schema, {"enum", "minimum", "maximum"}), bad) == []


# ---------------------------------------------------------------------------------------------------- llama.cpp grammar
def gbnf(schema: dict[str, Any]) -> str:
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    return str(grammar.json_schema_to_gbnf(json.dumps(schema)))


def test_which_keywords_llama_cpp_grammars_enforce() -> None:
    """``llama_cpp`` turns a schema into a grammar with its Python port of json-schema-to-grammar: ``enum``,
    ``const``, ``minItems``/``maxItems``, ``anyOf`` and ``required`` shape the grammar; integer ``minimum``/``maximum``
    and a ``pattern`` on an integer leave it exactly as for any integer."""
    integer = gbnf({"type": "integer"})
    assert gbnf({"type": "integer", "minimum": 0, "maximum": 15}) == integer
    assert gbnf({"type": "integer", "pattern": "^[0-9]$"}) == integer
    assert gbnf({"type": "number", "minimum": -1.0, "maximum": 1.0}) == gbnf({"type": "number"})
    assert 'root ::= "0" | "1" | "2" | "3"' in gbnf({"type": "integer", "enum": [0, 1, 2, 3]})
    assert 'root ::= "7"' in gbnf({"type": "integer", "const": 7})
    bounded = gbnf({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2})
    assert bounded != gbnf({"type": "array", "items": {"type": "number"}}) and "*" not in bounded.split("root ::=")[1]
    union = gbnf({"anyOf": [{"type": "integer", "enum": [0]}, {"type": "string"}]})
    assert "root ::= alternative-0 | string" in union and 'alternative-0 ::= "0"' in union
    required = gbnf({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                     "additionalProperties": False})
    assert '"}" space' in required and "a-kv" in required.split("root ::=")[1].split("\n")[0]


_TOKEN = re.compile(r'\s*("(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z0-9-]+|[()|?*+])')


def grammar_regex(grammar: str) -> re.Pattern[str]:
    """A regular expression equal to a non-recursive GBNF grammar from the converter (rules inlined)."""
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())

    def body(name: str, seen: tuple[str, ...]) -> str:
        assert name not in seen, f"recursive rule {name}"
        out, text = [], rules[name]
        pos = 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            assert m, text[pos:]
            tok, pos = m.group(1), m.end()
            if tok.startswith('"'):
                out.append(re.escape(json.loads(tok)))
            elif tok.startswith("["):
                out.append(tok)
            elif tok in "()|?*+":
                out.append("(?:" if tok == "(" else tok)
            else:
                out.append(f"(?:{body(tok, (*seen, name))})")
        return "".join(out)

    return re.compile(body("root", ()), re.DOTALL)


def in_grammar_order(answer: dict[str, Any], schema: dict[str, Any]) -> str:
    """``answer`` as compact JSON with its keys where the grammar wants them: required first, then the others."""
    def order(node: Any, sch: dict[str, Any]) -> Any:
        if "$ref" in sch:
            sch = schema["$defs"][sch["$ref"].rsplit("/", 1)[1]]
        if "anyOf" in sch:
            fits = [a for a in sch["anyOf"] if not schema_errors({**a, "$defs": schema.get("$defs", {})}, node)]
            sch = (fits or sch["anyOf"])[0]
        if isinstance(node, list):
            return [order(v, sch.get("items", {})) for v in node]
        if not isinstance(node, dict):
            return node
        props = list(sch["properties"])
        keys = [k for k in props if k in sch.get("required", [])] + [k for k in props if k not in sch["required"]]
        return {k: order(node[k], sch["properties"][k]) for k in keys if k in node}

    return json.dumps(order(answer, schema), separators=(",", ":"))


@pytest.mark.parametrize(("name", "env_id"), [("table", "FrozenLake-v1"), ("edits", "CartPole-v1"),
                                              ("rules", "CartPole-v1"), ("rules", "Hopper-v5"),
                                              ("rules", "FrozenLake-v1")])
def test_the_grammar_takes_valid_answers_and_refuses_out_of_bounds(name: str, env_id: str) -> None:
    fmt, ctx = make_format(name), fctx(env_id)
    schema = fmt.json_schema(ctx)
    grammar = grammar_regex(gbnf(schema))
    rng = np.random.default_rng(7)
    valid = [json.loads(fmt.render(ctx.current, ctx, "why"))] + [random_answer(rng, name, ctx) for _ in range(30)]
    for answer in valid:
        assert grammar.fullmatch(in_grammar_order(completed(name, answer, ctx), schema)), answer
    refused = [a for n, e, a in OUT_OF_BOUNDS if (n, e) == (name, env_id)]
    assert refused or name == "edits"
    for answer in refused:
        text = in_grammar_order(completed(name, answer, ctx), schema)
        assert not grammar.fullmatch(text), text
    if name == "edits":  # bins 0..2 on dim 0 and 0..5 on dim 2
        ok = {"rationale": "r", "edits": [{"conditions": [{"dim": 2, "min_bin": 0, "max_bin": 5}], "action": 1}]}
        assert grammar.fullmatch(in_grammar_order(ok, schema))
        ok["edits"][0]["conditions"][0]["dim"] = 0
        assert not grammar.fullmatch(in_grammar_order(ok, schema))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Hopper-v5", BIG, "BipedalWalker-v3.rich"])
def test_grammars_stay_small(env_id: str, record_property: Any) -> None:
    for name in ("table", "edits", "rules"):
        start = time.perf_counter()
        grammar = gbnf(make_format(name).json_schema(fctx(env_id)))
        record_property(f"{name}_grammar", f"{len(grammar)} chars, {time.perf_counter() - start:.3f} s")
        assert len(grammar) < 20_000, (name, len(grammar))
        # small, and still the answer's grammar: it takes the rendering of the current table and refuses it with
        # an action one past the last
        fmt, ctx = make_format(name), fctx(env_id)
        answer = completed(name, json.loads(fmt.render(ctx.current, ctx, "why")), ctx)
        regex = grammar_regex(grammar)
        text = in_grammar_order(answer, fmt.json_schema(ctx))
        assert regex.fullmatch(text), (name, env_id)
        bad = re.sub(r'"(action|otherwise)":\d+', rf'"\1":{ctx.target.n_actions}', text, count=1)
        assert bad != text and not regex.fullmatch(bad), (name, env_id)


def test_the_in_process_grammar_keeps_control_characters_out_of_strings() -> None:
    """llama-cpp-python's converter lets a raw line break into a JSON string (Qwen2.5-Coder-0.5B wrote multi-line
    rationales that no JSON parser takes); the in-process backend's grammar allows only what JSON allows there."""
    pytest.importorskip("llama_cpp.llama_grammar")
    from llm_policy_gen.clients.llamacpp import schema_grammar

    fmt, ctx = make_format("table"), fctx("FrozenLake-v1")
    schema = fmt.json_schema(ctx)
    answer = json.loads(fmt.render(ctx.current, ctx, "why"))
    raw = in_grammar_order({**answer, "rationale": "two\nlines"}, schema).replace("\\n", "\n")
    escaped = in_grammar_order({**answer, "rationale": "two\nlines"}, schema)
    assert "\n" in raw and "\\n" in escaped
    assert grammar_regex(gbnf(schema)).fullmatch(raw)  # the converter's own grammar: the bug this works around
    ours = grammar_regex(schema_grammar(schema))
    assert not ours.fullmatch(raw)
    assert ours.fullmatch(escaped)
