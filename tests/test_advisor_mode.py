"""``--mode advisor``: how the learner follows advice, the decay of its probability, that the learner (never the
advice) is judged, the offline stand-in, and resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_helpers import LAKE8, answer, cfg, kill_and_resume, path_advice, quiet, write_replay

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Episode
from llm_policy_gen.discretize import DiscreteDiscretizer
from llm_policy_gen.modes.qtable import LearnerPolicy, QLearner
from llm_policy_gen.run import train
from llm_policy_gen.storage.runlog import read_jsonl


def policy(p: float, epsilon: float, advice: np.ndarray, q: np.ndarray, seed: int = 0) -> LearnerPolicy:
    learner = QLearner(*q.shape)
    learner.load_state_dict({**learner.state_dict(), "q": q, "visits": np.ones(q.shape, np.int64)})  # learned
    return LearnerPolicy(learner, DiscreteDiscretizer(q.shape[0]), np.random.default_rng(seed), epsilon, advice, p)


def test_the_learner_takes_the_advice_with_probability_p() -> None:
    states = np.arange(20).repeat(50)
    q = np.tile(np.array([0.0, 1.0, 0.0]), (20, 1))  # greedy: action 1 everywhere
    advice = np.full(20, 2)
    assert np.all(policy(1.0, 0.0, advice, q).act(states) == 2)
    assert np.all(policy(0.0, 0.0, advice, q).act(states) == 1)
    half = policy(0.5, 0.0, advice, q)
    acts = half.act(states)
    assert set(acts.tolist()) == {1, 2} and half.advised == int(np.sum(acts == 2)) and half.steps == states.size
    assert 0.4 < half.advised / half.steps < 0.6
    explore = policy(0.0, 1.0, advice, q).act(states)
    assert set(explore.tolist()) == {0, 1, 2}


def test_greedy_ties_are_broken_at_random_in_training_and_by_the_lowest_action_when_judged() -> None:
    q = np.zeros((4, 3))
    acts = policy(0.0, 0.0, np.zeros(4, dtype=np.int64), q).act(np.arange(4).repeat(100))
    assert set(acts.tolist()) == {0, 1, 2}
    learner = QLearner(4, 3)
    assert learner.greedy().tolist() == [0, 0, 0, 0]


def one_step(state: int, action: int, reward: float) -> Episode:
    return Episode(0, np.array([state]), np.array([action]), np.array([reward]), True, False)


def test_optimism_about_untried_actions_does_not_overrule_the_advice() -> None:
    # CartPole-like: reward 1 a step, optimistic start 100 = 1 / (1 - gamma); every episode here ends at once.
    learner = QLearner(3, 2, alpha=0.5, gamma=0.99, q_init=100.0)
    # State 0: only the advised action 1 was taken (its value fell to 50.5); action 0 is untried and still at 100.
    # State 1: both tried, and action 1 earned more than the advised action 0. State 2: nothing tried.
    learner.learn([one_step(0, 1, 1.0), one_step(1, 0, 0.0), one_step(1, 1, 1.0)])
    advice = np.array([1, 0, 1])
    assert learner.greedy().tolist() == [0, 1, 0]  # plain greedy: the untried action beats the advice
    # With the advice: untried actions are worth no more than the advised one and ties go to the advice, while
    # what the learner tried itself overrules the advice (state 1).
    assert learner.greedy(advice).tolist() == [1, 1, 1]
    # Training steps see the same values (ties broken at random there): in state 0 the untried action is tried
    # no more often than the advised one while the learner is advised, and always when it is not.
    states = np.zeros(200, dtype=np.int64)
    advised = LearnerPolicy(learner, DiscreteDiscretizer(3), np.random.default_rng(0), 0.0, advice, 1e-12).act(states)
    assert set(advised.tolist()) == {0, 1} and 0.4 < float(np.mean(advised == 1)) < 0.6
    alone = LearnerPolicy(learner, DiscreteDiscretizer(3), np.random.default_rng(0), 0.0, advice, 0.0).act(states)
    assert set(alone.tolist()) == {0}
    # The visits are part of the learner's state: a copy judges the same table.
    assert learner.copy().greedy(advice).tolist() == [1, 1, 1]


def test_the_advice_probability_decays_every_iteration(tmp_path: Path) -> None:
    res = train(cfg(tmp_path, mode="advisor", iterations=4, candidates=1, advisor_prob=0.8, advisor_decay=0.5),
                log=quiet)
    events = read_jsonl(res.run_dir / "events.jsonl")
    probs = [e["advice_prob"] for e in events]
    assert probs[0] == 0.8 and all(b == pytest.approx(a * 0.5) for a, b in zip(probs, probs[1:], strict=False))
    assert all(0.0 <= e["advised_share"] <= 1.0 for e in events)
    config = json.loads((res.run_dir / "config.json").read_text())
    assert config["mode"] == res.summary["mode"] == "advisor" and config["target"] == "action"
    calls = read_jsonl(res.run_dir / "transcripts.jsonl")
    assert calls and all("not an LLM" in c["model"] and c["mode"] == "advisor" for c in calls)
    # offline sent no prompt: its replay asks the prompt a model would get
    again = train(cfg(tmp_path / "again", mode="advisor", iterations=1, candidates=1, advisor_prob=0.8,
                      advisor_decay=0.5, backend=f"replay:{res.run_dir}"), log=quiet)
    assert "probability 0.8 per step" in read_jsonl(again.run_dir / "transcripts.jsonl")[0]["messages"][1]["content"]


def test_good_advice_makes_the_learner_solve_the_big_lake_and_only_the_learner_is_judged(tmp_path: Path) -> None:
    advice = path_advice("8x8")
    results = {}
    for name, p in (("followed", 0.9), ("ignored", 0.0)):
        backend = write_replay(tmp_path / f"{name}.jsonl", lambda _i, _c: answer(advice, "action", LAKE8), 3)
        results[name] = train(cfg(tmp_path / name, mode="advisor", backend=backend, iterations=3, candidates=1,
                                  env_kwargs=LAKE8, advisor_prob=p), log=quiet)
    assert results["followed"].summary["best_eval_mean"] == 1.0
    # Advice the learner never follows teaches it nothing: the same perfect advice, judged as the learner's table.
    assert results["ignored"].summary["best_eval_mean"] == 0.0
    # The kept table is the learner's greedy table with the advice resolving what the learner never tried; on this
    # deterministic lake nothing it tried contradicted the path, so it is the advice.
    kept = json.loads((results["followed"].run_dir / "best_policy.json").read_text())["table"]
    assert kept == advice.tolist()


def test_an_advised_run_through_the_cli_prints_its_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "FrozenLake-v1", "--mode", "advisor", "--backend", "random", "--iterations", "2",
                 "--advisor-prob", "0.7", "--advisor-decay", "1", "--logs-dir", str(tmp_path), "--no-plots",
                 "--no-progress", "--heldout-episodes", "5"])
    out = capsys.readouterr().out
    assert code == 0 and "advisor mode" in out
    (run,) = (tmp_path / "FrozenLake-v1").iterdir()
    assert [e["advice_prob"] for e in read_jsonl(run / "events.jsonl")] == [0.7, 0.7]


@pytest.mark.parametrize("args, words", [
    (["--advisor-prob", "1.5"], "bad --advisor-prob 1.5: accepted a number in [0, 1]"),
    (["--advisor-decay", "-0.1"], "bad --advisor-decay -0.1: accepted a number in [0, 1]"),
])
def test_bad_advice_options_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   args: list[str], words: str) -> None:
    code = main(["train", "--mode", "advisor", "--logs-dir", str(tmp_path), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_killed_advisor_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    cut, ref = kill_and_resume(tmp_path, ["--backend", "offline", "--mode", "advisor", "--train-episodes", "3"],
                               "CartPole-v1", iterations=6, after=3)
    assert cut == ref
