"""The rules answer format: linear rules and decision lists compile into the table, exactly."""

import json

import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Collector
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import ProposalError
from llm_policy_gen.formats import FORMATS, make_format, table_format_names
from llm_policy_gen.formats.base import FormatContext, Target
from llm_policy_gen.formats.ruleset import RuleSet, RulesPolicy, feature_values
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.run import train
from llm_policy_gen.run.files import RunDir


def fctx(spec, target=None, current=None):
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    target = target or Target("action", n_actions=acts.n_actions)
    current = spec.default_table() if current is None else current
    return FormatContext(obs, acts, current, target, spec)


def answer(**parts):
    return json.dumps({"rationale": "r", **parts})


def hopper_rules():
    return [{"output": d, "weights": [1.0, -0.5 * d, 0.25, 0.3], "bias": 0.1 * d, "thresholds": [-0.3, 0.3]}
            for d in range(3)]


def test_rules_is_a_registered_table_format():
    assert "rules" in FORMATS and "rules" in table_format_names()


def test_scaled_bin_centres_run_from_minus_one_to_one():
    spec = get_spec("CartPole-v1")
    x = feature_values(spec.observation_discretizer())
    assert np.allclose(x[0], [-2 / 3, 0, 2 / 3]) and np.allclose(x[2], (2 * np.arange(6) + 1) / 6 - 1)
    grid = feature_values(get_spec("FrozenLake-v1").observation_discretizer())
    assert len(grid) == 2 and np.allclose(grid[1], [-0.75, -0.25, 0.25, 0.75])


def test_linear_levels_rule_compiles_to_the_table_it_describes():
    spec = get_spec("Hopper-v5")
    ctx = fctx(spec)
    parsed = make_format("rules").parse(answer(linear=hopper_rules()), ctx)
    obs = ctx.observation
    x = np.stack(np.meshgrid(*feature_values(obs), indexing="ij"), axis=-1).reshape(-1, 4)
    expected_levels = []
    for r in hopper_rules():
        score = x @ np.array(r["weights"]) + r["bias"]
        expected_levels.append((score >= -0.3).astype(int) + (score >= 0.3).astype(int))
    expected = np.ravel_multi_index(tuple(expected_levels), (3, 3, 3))
    assert np.array_equal(parsed.value, expected)
    assert parsed.source["format"] == "rules" and parsed.source["linear"][1]["weights"][1] == -0.5
    assert parsed.n_changed == int(np.sum(expected != spec.default_table()))


def test_decision_list_first_match_wins_and_otherwise_fills_the_rest():
    spec = get_spec("CartPole-v1")
    cases = [{"conditions": [{"dim": 2, "min_bin": 3, "max_bin": 5}], "action": 1},
             {"conditions": [{"dim": 2, "min_bin": 0, "max_bin": 5}, {"dim": 3, "min_bin": 4, "max_bin": 5}],
              "action": 0}]
    table = make_format("rules").parse(answer(cases=cases, otherwise=1), fctx(spec)).value.reshape(3, 3, 6, 6)
    assert (table[:, :, 3:, :] == 1).all()  # case 1 wins where both match
    assert (table[:, :, :3, 4:] == 0).all() and (table[:, :, :3, :4] == 1).all()


def test_scores_form_takes_the_highest_score():
    spec = get_spec("FrozenLake-v1")  # a 4 x 4 grid: dims row and col, 4 actions
    rules = [{"output": 1, "weights": [-1.0, 0.0], "bias": 0.0, "thresholds": []},  # down: high on upper rows
             {"output": 2, "weights": [1.0, 0.0], "bias": 0.0, "thresholds": []}]  # right: high on lower rows
    table = make_format("rules").parse(answer(linear=rules), fctx(spec)).value.reshape(4, 4)
    assert (table[:2] == 1).all() and (table[2:] == 2).all()


def test_value_target_takes_the_score_clipped_and_values_per_case():
    spec = get_spec("CartPole-v1")
    target = Target("value", low=-1.0, high=1.0)
    ctx = fctx(spec, target, np.zeros(324))
    linear = [{"output": 0, "weights": [0.0, 0.0, 3.0, 0.0], "bias": 0.0, "thresholds": []}]
    parsed = make_format("rules").parse(answer(linear=linear), ctx)
    x_angle = feature_values(ctx.observation)[2]
    assert np.allclose(parsed.value.reshape(3, 3, 6, 6)[0, 0, :, 0], np.clip(3 * x_angle, -1, 1))
    assert parsed.value.dtype == np.float64 and any("clipped" in n for n in parsed.notes)
    cases = [{"conditions": [{"dim": 0, "min_bin": 0, "max_bin": 0}], "value": 0.5}]
    table = make_format("rules").parse(answer(cases=cases, otherwise=-0.25), ctx).value.reshape(3, 3, 6, 6)
    assert (table[0] == 0.5).all() and (table[1:] == -0.25).all()


def test_rules_act_on_observations_exactly_like_the_compiled_table():
    rng = np.random.default_rng(0)
    for env_id, rules in (("Hopper-v5", {"linear": hopper_rules()}),
                          ("CartPole-v1", {"linear": [{"output": 0, "weights": [0.1, 0.2, 1.0, 0.3], "bias": 0.0,
                                                       "thresholds": [0.0]}],
                                           "cases": [{"conditions": [{"dim": 0, "min_bin": 0, "max_bin": 0}],
                                                      "action": 1}]})):
        spec = get_spec(env_id)
        ctx = fctx(spec)
        parsed = make_format("rules").parse(answer(**rules), ctx)
        policy = RulesPolicy(RuleSet.from_dict(parsed.source), ctx.observation, ctx.actions)
        obs_dim = max(d.index for d in spec.dims) + 1
        edges = np.concatenate([e for e in ctx.observation.edges])  # values exactly on bin edges too
        obs = rng.normal(0, 1, (4000, obs_dim))
        obs[:200, :] = rng.choice(edges, (200, obs_dim))
        assert np.array_equal(policy.act(obs), parsed.value[ctx.observation.encode(obs)])
    # and whole episodes: the same returns from the rules and from the table
    spec = get_spec("CartPole-v1")
    with Collector(spec, workers=1) as c:
        by_rules = c.evaluate(policy, range(5)).returns
        by_table = c.evaluate(parsed.value, range(5)).returns
    assert by_rules.tolist() == by_table.tolist()


def test_any_table_renders_as_a_decision_list_that_compiles_back_to_it():
    rng = np.random.default_rng(1)
    fmt = make_format("rules")
    for env_id in ("CartPole-v1", "FrozenLake-v1", "Hopper-v5"):
        spec = get_spec(env_id)
        ctx = fctx(spec)
        table = rng.integers(0, ctx.actions.n_actions, ctx.n_states)
        table[: ctx.n_states // 2] = 1  # a common entry becomes "otherwise"
        text = fmt.render(table, ctx, "as rules")
        assert np.array_equal(fmt.parse(text, ctx).value, table)
        assert json.loads(text)["otherwise"] == 1
    rules = RuleSet([], hopper_rules(), None)
    ctx = fctx(get_spec("Hopper-v5"))
    assert fmt.parse(fmt.render(rules, ctx, "r"), ctx).source["linear"] == hopper_rules()


@pytest.mark.parametrize(("parts", "message"), [
    ({"linear": [{"output": 0, "weights": [1.0], "bias": 0.0, "thresholds": [0.0, 1.0]}]}, "give 4 weights"),
    ({"linear": [{"output": 0, "weights": [1.0] * 4, "bias": 0.0, "thresholds": [0.0]}]},
     "has 3 levels: give 2 ascending thresholds"),
    ({"linear": [{"output": 0, "weights": [1.0] * 4, "bias": 0.0, "thresholds": [0.5, -0.5]}]},
     "thresholds must be ascending"),
    ({"linear": hopper_rules()[:2]}, "no rule for output 2 \\(foot torque\\)"),
    ({"linear": [{"output": 5, "weights": [1.0] * 4, "bias": 0.0, "thresholds": [0.0, 1.0]}]},
     "output 5 out of range 0..2"),
    ({"cases": [{"conditions": [{"dim": 4, "min_bin": 0, "max_bin": 0}], "action": 1}], "otherwise": 0},
     "cases\\[0\\].conditions\\[0\\]: dim 4 out of range 0..3"),
    ({"cases": [{"conditions": [], "action": 99}], "otherwise": 0}, "cases\\[0\\]: action 99 out of range 0..26"),
    ({"cases": []}, "give linear rules or an \"otherwise\" action"),
    ({"otherwise": 27}, "otherwise: action 27 out of range"),
    ({"linear": [{"output": 0, "weights": ["a", 1, 1, 1], "bias": 0.0, "thresholds": [0, 1]}]}, "valid number"),
])
def test_bad_rules_are_refused_with_repair_ready_messages(parts, message):
    with pytest.raises(ProposalError, match=message):
        make_format("rules").parse(answer(**parts), fctx(get_spec("Hopper-v5")))


def test_prose_and_missing_parts_are_refused():
    fmt, ctx = make_format("rules"), fctx(get_spec("CartPole-v1"))
    for text, message in (("push left", "no JSON object found"), ('{"rationale": "x"}', "no JSON object with"),
                          ('Here: {"rationale": "x", "linear": [', "truncated JSON")):
        with pytest.raises(ProposalError, match=message):
            fmt.parse(text, ctx)


def test_schema_and_prompt_section_are_offered_for_actions_and_values():
    spec = get_spec("Hopper-v5")
    fmt = make_format("rules")
    schema = fmt.json_schema(fctx(spec))
    assert set(schema["properties"]) == {"rationale", "cases", "linear", "otherwise"}
    assert schema["additionalProperties"] is False
    values = fmt.json_schema(fctx(spec, Target("value", low=-5, high=5), np.zeros(384)))
    assert "value" in json.dumps(values) and "ValueCase" in json.dumps(values)
    section = fmt.prompt_section(fctx(spec))
    for part in ("dim 0 = torso angle: bins 0..5; x = -0.83", "output 2 = foot torque: 3 levels", "FIRST case",
                 "weights", "thresholds"):
        assert part in section, part
    assert "$" not in section


@pytest.mark.slow
def test_a_rules_run_saves_its_rules_and_evaluates_and_plots(tmp_path, capsys):
    cfg = TrainConfig(env_id="CartPole-v1", backend="offline", output_format="rules", iterations=3, candidates=3,
                      logs_dir=str(tmp_path), progress=False, plots=False, heldout_episodes=10)
    res = train(cfg, log=lambda _m: None)
    best = json.loads((res.run_dir / "best_policy.json").read_text())
    assert best["source"]["format"] == "rules" and best["source"]["linear"]
    policy = TablePolicy.load(res.run_dir / "best_policy.json")
    compiled = RuleSet.from_dict(best["source"]).compile(policy.observation, policy.actions,
                                                         Target("action", n_actions=2))
    assert np.array_equal(compiled, policy.table)
    assert main(["evaluate", str(res.run_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean"] == pytest.approx(res.summary["best_eval_mean"])
    assert main(["plot", str(res.run_dir), "--policy", "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").is_file()
    prompt = RunDir(res.run_dir).load_transcripts()[-1]["messages"][-1]["content"]  # packed lines read back whole
    assert "The current rules (the table is compiled from them)" in prompt and "s0-5 (0, 0, 0)" not in prompt
