"""The offline optimiser: not an LLM, answers as valid text in the run's format, deterministic, steered by history."""

import json
import math
import re

import numpy as np

from llm_policy_gen.backends import BACKENDS, parse_backend_spec
from llm_policy_gen.clients.transcript import Transcript, read_transcript
from llm_policy_gen.envs import get_spec
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import Target
from llm_policy_gen.prompting.builder import HistoryEntry, PromptBuilder, PromptContext
from llm_policy_gen.prompting.memory import ExperienceMemory
from llm_policy_gen.proposers.base import Proposer
from llm_policy_gen.proposers.offline import OfflineProposer


def ctx_for(spec, iteration=1, table=None, history=(), memory=None, best=None, fmt="table", k=1):
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    mem = memory or ExperienceMemory(obs.n_states, acts.n_actions)
    table = spec.default_table() if table is None else table
    return PromptContext(spec=spec, observation=obs, actions=acts, iteration=iteration, current_table=table,
                         best_test_mean=best, test_episodes=3, memory=mem, evidence=mem.evidence(),
                         fmt=make_format(fmt), target=Target("action", n_actions=acts.n_actions),
                         history=list(history), candidates=k)


def tables(proposer, ctx, k=1):
    answers = proposer.propose(ctx, PromptBuilder().build(ctx), k)
    assert [a.candidate for a in answers] == list(range(1, k + 1)) and all(a.ok for a in answers)
    return [a.parsed.value for a in answers]


def test_offline_is_labelled_not_an_llm():
    name, model = parse_backend_spec("offline")
    assert (name, model) == ("offline", "") and BACKENDS.entry("offline").info["is_llm"] is False
    b = BACKENDS.load("offline")(seed=2)
    assert isinstance(b, OfflineProposer) and isinstance(b, Proposer) and b.is_llm is False
    d = b.describe()
    assert "not an LLM" in d["note"] and d["is_llm"] is False and d["seed"] == 2


def test_first_answer_is_the_prior_rule_as_valid_text():
    spec = get_spec("CartPole-v1")
    lines = []
    transcript = Transcript(None, {})
    transcript.write = lambda line, pack=False: lines.append(line)  # type: ignore[method-assign]
    b = OfflineProposer(transcript=transcript)
    ctx = ctx_for(spec)
    messages = PromptBuilder().build(ctx)
    (a,) = b.propose(ctx, messages, 1)
    assert a.ok and a.usage.calls == 1 and a.usage.input_tokens == a.usage.output_tokens == 0
    assert np.array_equal(a.parsed.value, spec.prior_table())
    assert "prior rule" in json.loads(a.text)["rationale"]
    # The same transcript line an LLM call writes, saying it is not an LLM.
    (line,) = lines
    assert line["iteration"] == 1 and line["candidate"] == 1 and line["attempt"] == 1 and line["valid"] is True
    assert "not an LLM" in line["model"] and line["response_text"] == a.text
    assert line["messages"] == [m.to_dict() for m in messages] and line["cost_usd"] == 0.0


def test_same_context_same_answer_and_rejections_change_the_search():
    spec = get_spec("CartPole-v1")

    def run(accept_second):
        b = OfflineProposer()
        answers = []
        (t1,) = tables(b, ctx_for(spec, 1))
        answers.append(t1)
        hist = [HistoryEntry(1, 200.0, 3, True, 10)]
        (t2,) = tables(b, ctx_for(spec, 2, t1, hist, best=200.0))
        answers.append(t2)
        hist = hist + [HistoryEntry(2, 300.0 if accept_second else 100.0, 3, accept_second, 10)]
        cur = t2 if accept_second else t1
        answers += tables(b, ctx_for(spec, 3, cur, hist, best=300.0 if accept_second else 200.0))
        return answers

    a, b_ = run(True), run(True)
    assert all(np.array_equal(x, y) for x, y in zip(a, b_, strict=True))
    assert not np.array_equal(a[1], a[0])  # a new candidate each time
    c = run(False)
    assert not np.array_equal(a[2], c[2])  # the verdict in the history steers the next proposal


def test_k_candidates_differ_and_the_first_is_the_prior():
    spec = get_spec("CartPole-v1")
    ctx = ctx_for(spec, k=4)
    first = tables(OfflineProposer(seed=0), ctx, 4)
    assert np.array_equal(first[0], spec.prior_table())
    assert len({t.tobytes() for t in first}) == 4 and not any(np.array_equal(t, ctx.current_table) for t in first)
    again = tables(OfflineProposer(seed=0), ctx_for(spec, k=4), 4)
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))
    other_seed = tables(OfflineProposer(seed=1), ctx_for(spec, k=4), 4)
    assert np.array_equal(other_seed[0], first[0]) and not np.array_equal(other_seed[1], first[1])


def _rule_weights(text: str) -> dict[str, float]:
    """The weights of an offline rule from its rationale ("... +0.23*pole angle +0.97*pole angular velocity ...")."""
    rule = json.loads(text)["rationale"].split("positive action when ")[1]
    return {name: float(w) for w, name in re.findall(r"([+-][0-9.]+)\*([a-z ]+?)(?= [+-])", rule)}


def test_gain_moves_keep_the_priors_signs_and_change_its_gains():
    """Odd candidates rescale the rule's weights (a gain move), even ones add noise to them: from CartPole's prior
    (push toward the side the pole leans and falls), the gain moves keep both signs far more often, and still change
    the ratio of the two gains 3-fold or more about half the time."""
    spec = get_spec("CartPole-v1")
    signs: dict[str, list[bool]] = {"gain move": [], "rule search": []}
    ratio_changed = []
    for seed in range(40):
        ctx = ctx_for(spec, k=4)
        for a in OfflineProposer(seed=seed).propose(ctx, PromptBuilder().build(ctx), 4)[1:]:
            move = json.loads(a.text)["rationale"].split(" (")[0]
            w = _rule_weights(a.text)
            angle, speed = w["pole angle"], w["pole angular velocity"]
            signs[move].append(angle > 0 and speed > 0)
            if move == "gain move" and angle > 0 and speed > 0:
                ratio_changed.append(abs(math.log((angle / speed) / (0.23 / 0.97))) > math.log(3))
    assert len(signs["gain move"]) == 40 and len(signs["rule search"]) == 80
    assert np.mean(signs["gain move"]) >= 0.85 and np.mean(signs["rule search"]) <= 0.75
    assert np.mean(ratio_changed) >= 0.4


def test_state_round_trip_continues_the_same_search():
    spec = get_spec("CartPole-v1")
    a = OfflineProposer(seed=3)
    (t1, _) = tables(a, ctx_for(spec, 1, k=2), 2)
    hist = [HistoryEntry(1, 200.0, 3, True, 10, candidate=1), HistoryEntry(1, 50.0, 3, False, 10, candidate=2)]
    b = OfflineProposer(seed=3)
    b.load_state_dict(a.state_dict())
    from_a = tables(a, ctx_for(spec, 2, t1, hist, best=200.0, k=2), 2)
    from_b = tables(b, ctx_for(spec, 2, t1, hist, best=200.0, k=2), 2)
    assert all(np.array_equal(x, y) for x, y in zip(from_a, from_b, strict=True))
    fresh = tables(OfflineProposer(seed=3), ctx_for(spec, 2, t1, hist, best=200.0, k=2), 2)
    assert not all(np.array_equal(x, y) for x, y in zip(from_a, fresh, strict=True))  # the state mattered


def test_model_move_explores_untried_actions_without_a_prior():
    """With no experience every pair is untried: each iteration's exploring table prefers another action in every
    state, so that four iterations try all four actions everywhere."""
    spec = get_spec("FrozenLake-v1")
    picks = []
    for iteration in (1, 2, 3, 4):
        (t,) = tables(OfflineProposer(), ctx_for(spec, iteration))
        picks.append(t)
    assert all(sorted(state) == [0, 1, 2, 3] for state in np.stack(picks).T)


def test_answers_use_the_runs_format():
    spec = get_spec("CartPole-v1")
    ctx = ctx_for(spec, fmt="edits")
    (a,) = OfflineProposer().propose(ctx, [], 1)
    assert a.ok and "edits" in json.loads(a.text) and np.array_equal(a.parsed.value, spec.prior_table())


# ---------------------------------------------------------------------------------------------------- population search
def rules_ctx(spec, iteration=1, history=(), k=5, table=None, fresh=()):
    ctx = ctx_for(spec, iteration, table, history, fmt="rules", k=k)
    ctx.fresh = list(fresh)
    return ctx


def centres(proposer, ctx, k):
    """The rule parameters of K proposals, as arrays (one row per output: weights then bias)."""
    answers = proposer.propose(ctx, [], k)
    assert all(a.ok for a in answers)
    return [np.array([r["weights"] + [r["bias"]] for r in a.parsed.source["linear"]]) for a in answers]


def test_population_search_proposes_the_centre_and_opposite_pairs():
    spec = get_spec("Pendulum-v1")
    first = centres(OfflineProposer(seed=4), rules_ctx(spec, k=5), 5)
    assert np.allclose(first[0], 0.0)  # no prior rule: the search starts from zero weights (zero torque)
    assert np.allclose(first[1], -first[2]) and np.allclose(first[3], -first[4])
    assert not np.allclose(first[1], first[3])
    again = centres(OfflineProposer(seed=4), rules_ctx(spec, k=5), 5)
    assert all(np.array_equal(x, y) for x, y in zip(first, again, strict=True))


def test_population_search_starts_from_the_spec_prior():
    spec = get_spec("CartPole-v1")
    answers = OfflineProposer().propose(ctx_for(spec, fmt="rules", k=3), [], 3)
    assert np.array_equal(answers[0].parsed.value, spec.prior_table())


def test_population_search_moves_toward_the_better_side_of_each_pair():
    spec = get_spec("Hopper-v5")
    b = OfflineProposer(seed=1)
    c1 = centres(b, rules_ctx(spec, 1, k=3), 3)
    hist = [HistoryEntry(1, 5.0, 1, False, 0, candidate=1), HistoryEntry(1, 50.0, 1, True, 0, candidate=2),
            HistoryEntry(1, 10.0, 1, False, 0, candidate=3)]
    c2 = centres(b, rules_ctx(spec, 2, hist, k=3), 3)
    step = c2[0] - c1[0]
    assert float(np.sum(step * (c1[1] - c1[0]))) > 0  # toward candidate 2, which scored higher than its mirror


def test_population_search_widens_its_noise_on_a_flat_landscape_and_saves_its_state():
    spec = get_spec("MountainCar-v0")
    a = OfflineProposer(seed=2)
    c1 = centres(a, rules_ctx(spec, 1, k=3), 3)
    flat = [HistoryEntry(1, -200.0, 2, False, 0, candidate=c) for c in (1, 2, 3)]
    b = OfflineProposer(seed=2)
    b.load_state_dict(a.state_dict())
    from_a = centres(a, rules_ctx(spec, 2, flat, k=3), 3)
    from_b = centres(b, rules_ctx(spec, 2, flat, k=3), 3)
    assert all(np.array_equal(x, y) for x, y in zip(from_a, from_b, strict=True))
    assert np.array_equal(from_a[0], c1[0])  # nothing to learn: the centre stays
    assert a.rules_search.noise > a.rules_search.noise0  # and the next candidates spread wider


def test_searches_never_step_an_environment(monkeypatch):
    import gymnasium

    def refuse(*_a, **_k):
        raise AssertionError("a proposer stepped an environment")

    contexts = [ctx_for(get_spec("Hopper-v5"), fmt="rules", k=3), ctx_for(get_spec("FrozenLake-v1"), k=3)]
    monkeypatch.setattr(gymnasium, "make", refuse)
    for ctx in contexts:
        assert all(a.ok for a in OfflineProposer().propose(ctx, [], 3))


# ---------------------------------------------------------------------------------------------------- model search
def chain_episode(states, actions, rewards, terminated=True):
    from llm_policy_gen.collect import Episode

    return Episode(0, np.array(states), np.array(actions), np.array(rewards, dtype=float), terminated, False)


def test_model_search_exploits_what_it_learned_and_explores_what_it_did_not():
    spec = get_spec("FrozenLake-v1.deterministic")  # right along row 0, then down column 3 is not safe; any path
    path = chain_episode([0, 1, 2, 6, 10, 14], [2, 2, 1, 1, 1, 2], [0, 0, 0, 0, 0, 1.0])
    b = OfflineProposer()
    ctx = ctx_for(spec, k=2)
    ctx.fresh = [path]
    explore, exploit = tables(b, ctx, 2)
    assert [exploit[s] for s in (0, 1, 2, 6, 10, 14)] == [2, 2, 1, 1, 1, 2]  # the path that reached the goal
    assert explore[3] != 0 or explore[4] != 0 or not np.array_equal(explore, exploit)
    # the model is kept: a later call without new episodes still knows the path
    again = OfflineProposer()
    again.load_state_dict(b.state_dict())
    ctx2 = ctx_for(spec, 2, exploit, k=2)
    assert np.array_equal(tables(again, ctx2, 2)[1], tables(b, ctx_for(spec, 2, exploit, k=2), 2)[1])
    assert b.empirical.steps == 6


def test_a_resumed_population_search_gives_the_uninterrupted_run(tmp_path):
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.run import resume, train

    def cfg(run_id, iterations):
        return TrainConfig(env_id="CartPole-v1", backend="offline", output_format="rules", candidates=5,
                           iterations=iterations, test_seeds="fresh", logs_dir=str(tmp_path), run_id=run_id,
                           progress=False, plots=False, heldout_episodes=5)

    quiet = lambda _m: None  # noqa: E731
    whole = train(cfg("whole", 4), log=quiet)
    train(cfg("cut", 2), log=quiet)
    resumed = resume(tmp_path / "CartPole-v1" / "cut", {"iterations": 4}, log=quiet)

    def kept(run_dir):
        best = json.loads((run_dir / "best_policy.json").read_text())
        lines = read_transcript(run_dir / "transcripts.jsonl")  # packed lines, read back whole
        return best["table"], best["source"], [x["response_text"] for x in lines]

    assert kept(whole.run_dir) == kept(resumed.run_dir)
    for key in ("best_eval_mean", "episodes_total", "env_steps_total", "best_iteration"):
        assert whole.summary[key] == resumed.summary[key]


def test_a_spec_sets_the_population_search_step():
    spec = get_spec("Pendulum-v1").with_overrides(search={"noise": 2.0, "step": 1.5})
    b = OfflineProposer()
    first = centres(b, rules_ctx(spec, k=3), 3)
    assert (b.rules_search.noise, b.rules_search.step) == (2.0, 1.5)
    default = centres(OfflineProposer(), rules_ctx(get_spec("Pendulum-v1"), k=3), 3)
    assert np.allclose(first[1], 4 * default[1], atol=0.01)  # the same direction, four times the default noise


def _six_iterations_adopting_only_in_the_first(proposer, spec):
    """The search centre of each of 6 iterations whose candidates score apart, one adopted in iteration 1 only."""
    history: list[HistoryEntry] = []
    centre = []
    for it in range(1, 7):
        centre.append(centres(proposer, rules_ctx(spec, it, history, k=3), 3)[0])
        history += [HistoryEntry(it, float(10 * it + cand * (3 - 2 * (cand % 2))), 1, it == 1 and cand == 2,
                                 0, candidate=cand) for cand in (1, 2, 3)]
    return centre


def test_a_search_with_no_adoption_for_restart_after_iterations_starts_again_from_its_first_rule():
    a = OfflineProposer(seed=5)
    centre = _six_iterations_adopting_only_in_the_first(a, get_spec("Pendulum-v1").with_overrides(
        search={"restart_after": 3}))
    assert not np.allclose(centre[1], 0.0)  # the search moved away from zero weights
    assert a.rules_search.restarts == 1 and a.rules_search.restarted_at == 4  # iterations 2-4 adopted nothing
    assert np.allclose(centre[4], 0.0) and not np.allclose(centre[3], 0.0)  # iteration 5 starts from the first rule
    b = OfflineProposer(seed=5)
    b.load_state_dict(a.state_dict())
    assert (b.rules_search.restarts, b.rules_search.restart_after) == (1, 3)
    plain = OfflineProposer(seed=5)  # without the setting the search never restarts
    _six_iterations_adopting_only_in_the_first(plain, get_spec("Pendulum-v1"))
    assert plain.rules_search.restarts == 0
