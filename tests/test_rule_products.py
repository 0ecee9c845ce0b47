"""Product features of linear rules (issue 20 item 2): ``"products": [{"dims": [i, j], "weight": w}]`` adds
``w * x_i * x_j`` to a rule's score, so that one rule can say "low AND falling fast". Compiled and acted through the
one evaluation path, in the schema and the prompt, refused when malformed, searched by the offline search where a
spec declares pairs, tuned by ``--rules-refine``; rules without products are unchanged."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jsonschema
import numpy as np
import pytest

from llm_policy_gen.discretize import BoxDiscretizer, DimSpec, DiscreteActions
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import ProposalError
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import FormatContext, Target
from llm_policy_gen.formats.rules import MAX_PRODUCTS, table_as_rules
from llm_policy_gen.formats.ruleset import RuleSet, RulesPolicy, feature_values


def tiny() -> FormatContext:
    """Two dimensions of three bins on [-1, 1] (x = -2/3, 0, +2/3), two actions."""
    obs = BoxDiscretizer([DimSpec("a", -1.0, 1.0, 3, index=0), DimSpec("b", -1.0, 1.0, 3, index=1)])
    acts = DiscreteActions(2)
    return FormatContext(obs, acts, np.zeros(9, dtype=np.int64), Target("action", n_actions=2))


def spec_ctx(env_id: str) -> FormatContext:
    spec = get_spec(env_id)
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    return FormatContext(obs, acts, spec.default_table(), Target("action", n_actions=acts.n_actions), spec)


def answer(linear: list[dict[str, Any]], **parts: Any) -> str:
    return json.dumps({"rationale": "r", "cases": [], "linear": linear, "otherwise": 0, **parts})


def rule(products: list[dict[str, Any]] | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"output": 0, "weights": [0.0, 0.0], "bias": 0.0, "thresholds": [0.0], **fields}
    if products is not None:
        out["products"] = products
    return out


def test_a_product_rule_compiles_to_the_sign_of_the_product():
    """Action 1 where 0.1 + x_a * x_b >= 0: both low, both high, or either in the middle (x = 0)."""
    parsed = make_format("rules").parse(answer([rule([{"dims": [0, 1], "weight": 1.0}], bias=0.1)]), tiny())
    assert parsed.value.reshape(3, 3).tolist() == [[1, 1, 0], [1, 1, 1], [0, 1, 1]]
    assert parsed.source["linear"][0]["products"] == [{"dims": [0, 1], "weight": 1.0}]


def test_a_square_and_a_weighted_sum_add_to_the_score():
    """score = -0.3 + 0.5 x_a + x_b^2: on the edge rows of b (x_b^2 = 4/9) unless a is low; nowhere in b's middle."""
    r = rule([{"dims": [1, 1], "weight": 1.0}], weights=[0.5, 0.0], bias=-0.3)
    table = make_format("rules").parse(answer([r]), tiny()).value.reshape(3, 3)
    x = np.array([-2 / 3, 0.0, 2 / 3])
    expected = (-0.3 + 0.5 * x[:, None] + x[None, :] ** 2 >= 0).astype(int)
    assert table.tolist() == expected.tolist() == [[0, 0, 0], [1, 0, 1], [1, 1, 1]]


def test_acting_on_observations_equals_the_compiled_table_with_products():
    ctx = spec_ctx("LunarLander-v3")
    rng = np.random.default_rng(5)
    linear = [{"output": a, "weights": [round(float(w), 3) for w in rng.normal(size=8)], "bias": 0.1 * a,
               "thresholds": [], "products": [{"dims": [1, 3], "weight": 2.0 * a}, {"dims": [4, 5], "weight": -1.5},
                                              {"dims": [2, 2], "weight": 0.7 - a}]} for a in range(4)]
    parsed = make_format("rules").parse(answer(linear), ctx)
    policy = RulesPolicy(RuleSet.from_dict(parsed.source), ctx.observation, ctx.actions)
    assert isinstance(ctx.observation, BoxDiscretizer)
    edges = np.concatenate(list(ctx.observation.edges))
    obs = rng.normal(0, 0.8, (5000, 8))
    obs[:300] = rng.choice(edges, (300, 8))
    assert np.array_equal(policy.act(obs), parsed.value[ctx.observation.encode(obs)])
    plain = make_format("rules").parse(answer([{k: v for k, v in r.items() if k != "products"} for r in linear]),
                                       ctx)
    assert not np.array_equal(plain.value, parsed.value)  # the products did change the table


def test_rules_without_products_compile_and_save_as_before():
    """No ``products`` key, or ``[]``: the same table and the same source as an answer written before products."""
    ctx = spec_ctx("LunarLander-v3")
    rng = np.random.default_rng(8)
    linear = [{"output": a, "weights": [round(float(w), 3) for w in rng.normal(size=8)], "bias": 0.0,
               "thresholds": []} for a in range(4)]
    old = make_format("rules").parse(answer(linear), ctx)
    empty = make_format("rules").parse(answer([{**r, "products": []} for r in linear]), ctx)
    assert old.source == empty.source and "products" not in json.dumps(old.source)
    assert old.value.tobytes() == empty.value.tobytes()
    # the table's and the source's bytes are those of the rule language before products (digests taken before)
    assert hashlib.sha256(old.value.tobytes()).hexdigest()[:16] == "0a42ea8b5de2de52"
    assert hashlib.sha256(json.dumps(old.source).encode()).hexdigest()[:16] == "c3bbcc995d7264e2"
    again = RuleSet.from_dict(json.loads(json.dumps(old.source)))
    assert again.compile(ctx.observation, ctx.actions, ctx.target).tobytes() == old.value.tobytes()


def test_products_round_trip_through_the_source_and_table_as_rules_has_none():
    ctx = tiny()
    parsed = make_format("rules").parse(answer([rule([{"dims": [0, 1], "weight": -0.75}])]), ctx)
    back = RuleSet.from_dict(json.loads(json.dumps(parsed.source)))
    assert back.linear[0]["products"] == [{"dims": [0, 1], "weight": -0.75}]
    assert np.array_equal(back.compile(ctx.observation, ctx.actions, ctx.target), parsed.value)
    text = make_format("rules").render(back, ctx, "again")
    assert np.array_equal(make_format("rules").parse(text, ctx).value, parsed.value)
    decision_list = table_as_rules(parsed.value, ctx.observation, ctx.target)
    assert decision_list.linear == [] and np.array_equal(
        decision_list.compile(ctx.observation, ctx.actions, ctx.target), parsed.value)


@pytest.mark.parametrize(("products", "message"), [
    ([{"dims": [0, 2], "weight": 1.0}], "linear[0].products[0]: dims must be two state dimensions in 0..1, got [0, 2]"),
    ([{"dims": [-1, 0], "weight": 1.0}], "dims must be two state dimensions in 0..1, got [-1, 0]"),
    ([{"dims": [0], "weight": 1.0}], "dims must be two state dimensions in 0..1, got [0]"),
    ([{"dims": [0, 1, 1], "weight": 1.0}], "got [0, 1, 1]"),
    ([{"dims": [0, 1], "weight": 1.0}] * (MAX_PRODUCTS + 1), f"linear[0]: at most {MAX_PRODUCTS} products, got 5"),
    ([{"dims": [0, 1]}], "weight"),
    ([{"dims": [0, 1], "weight": 1.0, "scale": 2}], "scale"),
    ([{"dims": [0, 1], "weight": "big"}], "weight"),
])
def test_bad_products_are_refused_with_repair_ready_messages(products: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ProposalError) as err:
        make_format("rules").parse(answer([rule(products)]), tiny())
    assert any(message in e for e in err.value.errors), err.value.errors


def test_a_non_finite_product_weight_is_refused():
    text = answer([rule([{"dims": [0, 1], "weight": 1.0}])]).replace('"weight": 1.0', '"weight": Infinity')
    with pytest.raises(ProposalError) as err:
        make_format("rules").parse(text, tiny())
    assert any("linear[0].products[0]: weight must be a finite number" in e for e in err.value.errors), err.value


@pytest.mark.parametrize("env_id", ["CartPole-v1", "LunarLander-v3", "Hopper-v5"])
def test_the_schema_takes_rules_with_and_without_products_and_bounds_them(env_id: str) -> None:
    fmt, ctx = make_format("rules"), spec_ctx(env_id)
    schema = fmt.json_schema(ctx)
    valid = jsonschema.Draft202012Validator(schema)
    parsed = fmt.parse(fmt.render(ctx.current, ctx, "r"), ctx)
    n_dims = len(feature_values(ctx.observation))
    shapes = schema["properties"]["linear"]["items"]["anyOf"]
    with_products = [s for s in shapes if "products" in s["properties"]]
    assert len(with_products) == len(shapes) // 2 and all(s["required"][-1] == "products" for s in with_products)
    products = with_products[0]["properties"]["products"]
    assert products["maxItems"] == MAX_PRODUCTS
    assert products["items"]["properties"]["dims"]["items"]["maximum"] == n_dims - 1
    rules = [{**s_rule, "products": [{"dims": [0, n_dims - 1], "weight": 0.5}]}
             for s_rule in json.loads(fmt.render(RuleSet([], _level_rules(ctx), None), ctx, "r"))["linear"]]
    full = {"rationale": "r", "cases": [], "linear": rules, "otherwise": int(parsed.value[0])}
    assert list(valid.iter_errors(full)) == []
    fmt.parse(json.dumps(full), ctx)  # and the validator takes it
    for bad in ([{"dims": [0, n_dims], "weight": 0.5}], [{"dims": [0], "weight": 0.5}],
                [{"dims": [0, 0], "weight": 0.5}] * (MAX_PRODUCTS + 1)):
        wrong = {**full, "linear": [{**rules[0], "products": bad}, *rules[1:]]}
        assert list(valid.iter_errors(wrong)) != []
        with pytest.raises(ProposalError):
            fmt.parse(json.dumps(wrong), ctx)


def _level_rules(ctx: FormatContext) -> list[dict[str, Any]]:
    """Rules in the form the task is asked for, zero weights."""
    from llm_policy_gen.formats.rules import asked_form
    from llm_policy_gen.formats.ruleset import output_levels

    n_dims = len(feature_values(ctx.observation))
    if asked_form(ctx.actions, ctx.spec) == "scores":
        return [{"output": a, "weights": [0.0] * n_dims, "bias": 0.0, "thresholds": []}
                for a in range(ctx.actions.n_actions)]
    return [{"output": d, "weights": [0.0] * n_dims, "bias": 0.0,
             "thresholds": [round(-1 + 2 * k / n, 3) for k in range(1, n)]}
            for d, n in enumerate(output_levels(ctx.actions))]


def test_the_prompt_explains_products_with_the_lunar_lander_example():
    section = make_format("rules").prompt_section(spec_ctx("CartPole-v1"))
    assert '"products": [{"dims": [i, j], "weight": w}' in section and f"(max {MAX_PRODUCTS})" in section
    assert "+ w * x_i * x_j" in section and "[1, 3]: low AND falling fast" in section


# ------------------------------------------------------------------------------------------------ the offline search
def rules_ctx(spec: Any, iteration: int = 1, history: tuple[Any, ...] = (), k: int = 5) -> Any:
    from llm_policy_gen.prompting.builder import PromptContext
    from llm_policy_gen.prompting.memory import ExperienceMemory

    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = ExperienceMemory(obs.n_states, acts.n_actions)
    return PromptContext(spec=spec, observation=obs, actions=acts, iteration=iteration,
                         current_table=spec.default_table(), best_test_mean=None, test_episodes=3, memory=mem,
                         evidence=mem.evidence(), fmt=make_format("rules"),
                         target=Target("action", n_actions=acts.n_actions), history=list(history), candidates=k)


def two_iterations(env_id: str, seed: int = 3) -> list[dict[str, Any]]:
    """The sources of the offline search's candidates of iterations 1 and 2 (5 each, fixed scores in between)."""
    from llm_policy_gen.prompting.builder import HistoryEntry
    from llm_policy_gen.proposers.offline import OfflineProposer

    spec = get_spec(env_id)
    search = OfflineProposer(seed=seed)
    first = search.propose(rules_ctx(spec, 1), [], 5)
    scores = [HistoryEntry(1, float(10 * c % 7), 1, c == 2, 0, candidate=c) for c in range(1, 6)]
    second = search.propose(rules_ctx(spec, 2, tuple(scores)), [], 5)
    assert all(a.ok for a in first + second)
    return [a.parsed.source for a in first + second]


@pytest.mark.parametrize(("env_id", "digest"), [("LunarLander-v3", "8dfbcc87c2542340"),
                                                ("Hopper-v5", "41acb281fba0666f")])
def test_without_declared_pairs_the_search_proposes_what_it_did_before(env_id: str, digest: str) -> None:
    """Digests of the candidates' sources taken before products existed: the same seeds give the same numbers."""
    sources = two_iterations(env_id)
    assert hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()[:16] == digest
    assert "products" not in json.dumps(sources)


def test_with_declared_pairs_the_search_moves_product_weights_too():
    spec = get_spec("LunarLander-v3.products")
    assert spec.search_products() == ((1, 3), (4, 5), (0, 2))  # y x y speed, angle x angular speed, x x x speed
    sources = two_iterations("LunarLander-v3.products")
    for source in sources:
        for rule in source["linear"]:
            assert [p["dims"] for p in rule["products"]] == [[1, 3], [4, 5], [0, 2]]
    weights = [[p["weight"] for r in s["linear"] for p in r["products"]] for s in sources]
    assert weights[0] == [0.0] * 12  # the centre starts with no products (the prior rule has none)
    assert weights[1] == [-w for w in weights[2]] and any(weights[1])  # a direction and its mirror
    assert weights[5] != weights[0]  # the centre moved along the product weights as well
    ctx = spec_ctx("LunarLander-v3.products")
    for source in sources[:3]:  # each is a valid answer of the format, and acts as it compiles
        text = make_format("rules").render(RuleSet.from_dict(source), ctx, "r")
        assert make_format("rules").parse(text, ctx).source["linear"] == source["linear"]


@pytest.mark.parametrize("products", [[["y position", "z speed"]], [["y position"]], "y position", [[1, 3]]])
def test_a_spec_with_bad_search_products_is_refused(products: Any) -> None:
    from llm_policy_gen.errors import SpecError

    spec = get_spec("LunarLander-v3").with_overrides(search={"products": products})
    with pytest.raises(SpecError, match="search products .* invalid; accepted: a list of pairs of dimension names"):
        spec.validate()
