"""``--mode reward``: the learner's shaping, the run's records, judging on the environment's own reward, the offline
stand-in's potentials, refusals and resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_helpers import LAKE8, answer, cfg, goal_distances, kill_and_resume, quiet, write_replay

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Collector, Episode
from llm_policy_gen.envs import get_spec
from llm_policy_gen.errors import NoValidAnswer
from llm_policy_gen.formats import make_format
from llm_policy_gen.formats.base import Target
from llm_policy_gen.keeper import SeedPlan
from llm_policy_gen.modes.qtable import QLearner
from llm_policy_gen.prompting.builder import PromptContext
from llm_policy_gen.prompting.memory import ExperienceMemory
from llm_policy_gen.proposers.potential import potential_tables, prior_potential
from llm_policy_gen.run import resolve_spec, train
from llm_policy_gen.storage.runlog import read_jsonl


def episode(states: list[int], actions: list[int], rewards: list[float], terminated: bool = True) -> Episode:
    return Episode(0, np.asarray(states), np.asarray(actions), np.asarray(rewards, dtype=float), terminated,
                   not terminated)


def random_episodes(rng: np.random.Generator, n: int, n_states: int, n_actions: int) -> list[Episode]:
    out = []
    for _ in range(n):
        t = int(rng.integers(2, 12))
        out.append(episode(rng.integers(0, n_states, t).tolist(), rng.integers(0, n_actions, t).tolist(),
                           rng.normal(size=t).tolist(), bool(rng.integers(0, 2))))
    return out


# ---------------------------------------------------------------------------------------------------- the learner
def test_shaping_with_a_potential_acts_as_a_value_prior() -> None:
    """Wiewiora (2003): learning with shaping from Q0 gives Q - phi of learning without it from Q0 + phi(s)."""
    rng = np.random.default_rng(3)
    ns, na = 9, 3
    phi = rng.normal(scale=5.0, size=ns)
    episodes = random_episodes(rng, 40, ns, na)
    shaped = QLearner(ns, na, alpha=0.3, gamma=0.9, q_init=1.0)
    plain = QLearner(ns, na, alpha=0.3, gamma=0.9, q_init=1.0)
    plain.load_state_dict({**plain.state_dict(), "q": plain.q + phi[:, None]})
    assert shaped.learn(episodes, phi) == plain.learn(episodes) > 0
    np.testing.assert_allclose(shaped.q, plain.q - phi[:, None], atol=1e-9)
    assert np.array_equal(shaped.greedy(), plain.greedy())


def test_termination_ends_the_potential_and_a_cut_last_step_is_not_learned() -> None:
    phi = np.array([2.0, 5.0, 0.0])
    learner = QLearner(3, 2, alpha=0.5, gamma=0.9, q_init=0.0)
    assert learner.learn([episode([1], [1], [1.0], terminated=True)], phi) == 1
    assert learner.q[1, 1] == pytest.approx(0.5 * (1.0 - phi[1]))  # target r - phi(s): the end is worth 0
    cut = QLearner(3, 2)
    assert cut.learn([episode([0, 1, 2], [0, 1, 0], [1.0, 1.0, 1.0], terminated=False)], phi) == 2
    assert cut.q[2, 0] == 0.0 and cut.episodes == 1


# ---------------------------------------------------------------------------------------------------- runs
def test_a_reward_run_says_its_mode_and_judges_on_the_environments_reward(tmp_path: Path) -> None:
    res = train(cfg(tmp_path, mode="reward", candidates=2), log=quiet)
    rd, s = res.run_dir, res.summary
    config = json.loads((rd / "config.json").read_text())
    assert config["mode"] == s["mode"] == "reward" and config["target"] == "value"
    assert config["learner"]["alpha"] == 0.2 and config["learner"]["gamma"] == 0.99
    calls = read_jsonl(rd / "transcripts.jsonl")
    assert calls and all(c["mode"] == "reward" and c["valid"] and "not an LLM" in c["model"] for c in calls)
    rows = json.loads(calls[0]["response_text"])["rows"]
    assert set(rows[0]) == {"state", "value"} and len(rows) == 16
    spec = resolve_spec(cfg(tmp_path))
    plan = SeedPlan(0)
    with Collector(spec) as col:
        for e in read_jsonl(rd / "events.jsonl"):
            assert e["mode"] == "reward" and len(e["learner_train_returns"]) == 2
            table = np.asarray(json.loads((rd / "policies" / f"iter_{e['iteration']:04d}.json").read_text())["table"])
            seeds = [plan.test(j) for j in range(e["eval_episodes"])]
            returns = [ep.ret for ep in col.collect(table, seeds)]
            assert e["eval_returns"] == returns  # the greedy table, on the environment's own reward
            assert all(0.0 <= r <= 1.0 for r in returns)
    assert 0.0 <= s["best_eval_mean"] <= 1.0 and s["learner_updates"] > 0


def test_candidates_share_the_training_seeds_and_equal_ones_train_once(tmp_path: Path) -> None:
    phi = -goal_distances("4x4").astype(float)
    backend = write_replay(tmp_path / "same.jsonl", lambda _i, c: answer(phi + (c == 3) * 0.5, "value"), 2, 3)
    res = train(cfg(tmp_path / "logs", mode="reward", backend=backend, candidates=3, iterations=2), log=quiet)
    events = read_jsonl(res.run_dir / "events.jsonl")
    plan = SeedPlan(0)
    n = json.loads((res.run_dir / "config.json").read_text())["config"]["train_episodes"]  # the spec's 10
    assert [e["train_seeds"] for e in events] == [[plan.train(j) for j in range(n)],
                                                  [plan.train(j) for j in range(n, 2 * n)]]
    for e in events:
        returns = e["learner_train_returns"]
        assert returns[0] == returns[1] and e["candidate_means"][0] == e["candidate_means"][1]
    episodes = res.summary["episodes_total"]
    two = train(cfg(tmp_path / "two", mode="reward", backend=write_replay(
        tmp_path / "two.jsonl", lambda _i, c: answer(phi + (c == 2) * 0.5, "value"), 2, 2), candidates=2,
        iterations=2), log=quiet)
    assert two.summary["episodes_total"] == episodes  # three answers, two of them equal: two learners trained


def test_a_potential_that_knows_the_way_lets_the_learner_solve_the_big_lake(tmp_path: Path) -> None:
    phi = np.where(goal_distances("8x8") >= 0, 0.99 ** goal_distances("8x8"), 0.0)
    runs = {}
    for name, values in (("shaped", phi), ("unshaped", np.zeros(64))):
        backend = write_replay(tmp_path / f"{name}.jsonl", lambda _i, _c, v=values: answer(v, "value", LAKE8), 6)
        runs[name] = train(cfg(tmp_path / name, mode="reward", backend=backend, iterations=6, candidates=1,
                               env_kwargs=LAKE8), log=quiet).summary
    assert runs["shaped"]["best_eval_mean"] == 1.0 and runs["shaped"]["solved"]
    assert runs["unshaped"]["best_eval_mean"] == 0.0


def test_potentials_outside_the_bound_go_back_for_repair(tmp_path: Path) -> None:
    backend = write_replay(tmp_path / "big.jsonl", lambda _i, _c: answer(np.full(16, 1e4), "value"), 1)
    # its only answer refused: the run ends as a failure (exit 1 on the command line, issue 29 item 11)
    with pytest.raises(NoValidAnswer, match="out of range"):
        train(cfg(tmp_path / "logs", mode="reward", backend=backend, iterations=1, candidates=1,
                  repair_attempts=0, reward_potential_bound=50.0), log=quiet)
    (run_dir,) = (tmp_path / "logs" / "FrozenLake-v1").iterdir()
    (call,) = read_jsonl(run_dir / "transcripts.jsonl")
    assert not call["valid"] and any("out of range [-50, 50]" in e for e in call["errors"])
    (event,) = read_jsonl(run_dir / "events.jsonl")
    assert event["learner_candidate"] is None and event["learner_train_returns"] == [None]


# ---------------------------------------------------------------------------------------------------- offline
def _context(env_id: str, episodes: list[Episode], env_kwargs: dict | None = None) -> PromptContext:
    spec = resolve_spec(cfg(Path("."), env_id=env_id, env_kwargs=env_kwargs or {}))
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    memory = ExperienceMemory(obs.n_states, acts.n_actions)
    memory.add(episodes)
    return PromptContext(spec=spec, observation=obs, actions=acts, iteration=1, current_table=np.zeros(obs.n_states),
                         best_test_mean=None, test_episodes=3, memory=memory, evidence=memory.evidence(),
                         fmt=make_format("table"), target=Target("value", low=-100.0, high=100.0),
                         extra={"learner_gamma": 0.99})


def test_the_offline_potential_follows_the_prior_rule() -> None:
    spec = get_spec("CartPole-v1")
    with Collector(spec) as col:
        ctx = _context("CartPole-v1", col.collect(spec.default_table(), [1, 2, 3]))
    prior = prior_potential(ctx)
    assert prior is not None and prior.max() <= 0.0 and prior.min() == -1.0
    centres = ctx.observation.centers()  # type: ignore[attr-defined]
    score = np.abs(centres[:, 2] + 0.3 * centres[:, 3])  # the spec's prior: pole angle + 0.3 angular velocity
    assert np.argmax(prior) == np.argmin(score) and np.argmin(prior) == np.argmax(score)
    tables = potential_tables(ctx, 4, seed=0)
    assert len(tables) == 4 and all("not an LLM" in why for _, why in tables)
    assert all(np.all(np.abs(t) <= 100.0) for t, _ in tables)
    assert len({t.tobytes() for t, _ in tables}) == 4
    again = potential_tables(ctx, 4, seed=0)
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(tables, again, strict=True))


def test_the_offline_potential_rises_along_a_path_that_reached_the_goal() -> None:
    # 4x4 lake: down, down, right, right, down, right reaches the goal from the start.
    path = [0, 4, 8, 9, 10, 14]
    success = episode(path, [1, 1, 2, 2, 1, 2], [0, 0, 0, 0, 0, 1.0])
    ctx = _context("FrozenLake-v1", [success])
    tables = potential_tables(ctx, 3, seed=0)
    phi, why = tables[2]
    assert "without optimism" in why
    assert all(phi[a] < phi[b] for a, b in zip(path, path[1:], strict=False))
    explore, why = tables[0]  # untried actions are worth the best value seen: every state on the path has some
    assert "untried actions worth 1" in why and np.all(explore[path] == explore[path].max())


# ---------------------------------------------------------------------------------------------------- user errors
@pytest.mark.parametrize("args, words", [
    (["--mode", "reward", "--backend", "kept-table-q"], "kept-table-q writes action tables only"),
    (["--mode", "reward", "--reward-potential-bound", "0"], "bad --reward-potential-bound 0.0: accepted a number > 0"),
    (["--mode", "reward", "--q-gamma", "1"], "bad --q-gamma 1.0: accepted a number in [0, 1)"),
    (["--mode", "reward", "--q-alpha", "0"], "bad --q-alpha 0.0: accepted a number in (0, 1]"),
    (["--mode", "reward", "--learner-alpha", "0"], "bad --q-alpha 0.0: accepted a number in (0, 1]"),  # old spelling
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          words: str) -> None:
    code = main(["train", "--env", "FrozenLake-v1", "--logs-dir", str(tmp_path), "--no-plots", "--no-progress", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_a_killed_reward_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    cut, ref = kill_and_resume(tmp_path, ["--backend", "offline", "--mode", "reward", "--train-episodes", "3"],
                               "CartPole-v1", iterations=6, after=2)
    assert cut == ref
