"""``q-learning``: the standard epsilon-greedy tabular Q-learner in its own episodes (issue 32, item 6).

It finds CliffWalking-v1's optimum, its episodes and steps are counted like every other, a killed run resumes to the
uninterrupted result, ``--backend``/``--mode`` pair as documented, and a run directory written before the name moved
(today's proposer, now ``kept-table-q``) still resumes as what it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from run_helpers import comparable, kill_and_resume

from llm_policy_gen.cli import main
from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec
from llm_policy_gen.modes.qlearning import OnlineQPolicy, QLearningMode, QLearningOptions
from llm_policy_gen.modes.qtable import QLearner
from llm_policy_gen.run.checkpoint import load_checkpoint
from llm_policy_gen.storage.runlog import read_jsonl
from llm_policy_gen.sweep.results import read_results

#: A run directory written by the code before the standard learner took the name (``train --env FrozenLake-v1
#: --backend q-learning --iterations 3 --seed 2 --heldout-episodes 10 --no-plots``, made with commit dd88676).
OLD_RUN = Path(__file__).parent / "data" / "old_q_learning_run"


def train(tmp_path: Path, *args: str, env: str = "CliffWalking-v1", run_id: str = "run") -> tuple[int, Path]:
    code = main(["train", "--env", env, "--logs-dir", str(tmp_path), "--run-id", run_id, "--no-plots",
                 "--no-progress", "--quiet", *args])
    return code, tmp_path / env / run_id


def test_each_step_updates_q_online_with_the_environment_reward() -> None:
    spec = get_spec("CliffWalking-v1")
    learner = QLearner(48, 4, alpha=0.5, gamma=0.9)
    policy = OnlineQPolicy(learner, spec.observation_discretizer(), np.random.default_rng(0), epsilon=0.0)
    learner.q[36, :] = [-5.0, 0.0, -5.0, -5.0]  # the start cell: greedy "move right", into the cliff
    with Collector(spec, workers=1) as col:
        ep = col.collect(policy, [0])[0]
    # Stepping into the cliff costs -100 and sends the agent back to the start (36), so the first update is
    # Q(36, right) = 0 + 0.5 * (-100 + 0.9 * max Q(36) - 0) = -50, max Q(36) being 0 at that moment; the very next
    # step, from the start again, already avoids the cliff (an update after each episode would step into it again).
    assert ep.states[0] == 36 and ep.actions[0] == 1 and ep.rewards[0] == -100.0
    assert ep.states[1] == 36 and ep.actions[1] != 1
    assert learner.updates == ep.length and learner.visits.sum() == ep.length
    assert learner.q[36, 1] <= -50.0 and learner.episodes == 0  # the mode counts episodes, not the policy


def test_epsilon_falls_linearly_then_stays() -> None:
    s = QLearningOptions(q_epsilon_start=1.0, q_epsilon_end=0.1, q_epsilon_episodes=10)
    assert [round(s.epsilon(e), 6) for e in (0, 5, 10, 50)] == [1.0, 0.55, 0.1, 0.1]
    assert QLearningMode.Options is QLearningOptions  # the mode's own options, the documented defaults
    assert (s.q_alpha, s.q_gamma, s.q_init) == (0.5, 0.99, 0.0)


@pytest.mark.parametrize("seed", [0])
def test_cliffwalking_reaches_the_optimum_within_500_counted_episodes(tmp_path: Path, seed: int) -> None:
    code, run = train(tmp_path, "--backend", "q-learning", "--seed", str(seed), "--iterations", "200",
                      "--max-episodes", "500", "--heldout-episodes", "5")
    assert code == 0
    events = read_jsonl(run / "events.jsonl")
    reached = [e for e in events if e.get("heldout_mean") == -13.0]
    assert reached, [e.get("heldout_mean") for e in events]
    assert reached[0]["episodes_total"] <= 500
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_eval_mean"] == -13.0 and summary["mode"] == "q-learning"
    assert summary["backend"] == "q-learning" and summary["is_llm"] is False and summary["llm_calls"] == 0


def test_its_episodes_and_steps_are_counted_like_every_other(tmp_path: Path) -> None:
    code, run = train(tmp_path, "--backend", "q-learning", "--iterations", "50", "--max-episodes", "60",
                      "--heldout-episodes", "3", "--train-episodes", "5", env="Taxi-v4")
    assert code == 0
    events = read_jsonl(run / "events.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    # --train-episodes learner episodes an iteration, each on its own training seed, all counted together with the
    # keeper's test and confirmation episodes (Taxi's spec tests on 10 fresh seeds an iteration).
    assert [len(e["train_seeds"]) for e in events] == [5] * len(events)
    assert [e["learner_episodes"] for e in events] == [5 * e["iteration"] for e in events]
    assert len({s for e in events for s in e["train_seeds"]}) == 5 * len(events)
    before = [10] + [e["episodes_total"] for e in events[:-1]]  # the initial table's 10 test episodes
    assert all(e["episodes_total"] - b >= 5 + 10 for e, b in zip(events, before, strict=True))
    assert all(e["env_steps_total"] >= 10 * e["episodes_total"] for e in events)  # no Taxi trip is shorter
    assert events[-2]["episodes_total"] < 60 <= events[-1]["episodes_total"]  # --max-episodes counts them
    assert "episode budget reached" in summary["stop_reason"]
    assert (summary["episodes_total"], summary["env_steps_total"]) == \
        (events[-1]["episodes_total"], events[-1]["env_steps_total"])
    assert all(e["candidates"] == 1 and len(e["candidate_means"]) == 1 for e in events)
    settings = QLearningOptions()
    assert events[0]["epsilons"][:2] == [settings.epsilon(0), settings.epsilon(1)]
    assert events[-1]["epsilons"][-1] == round(settings.epsilon(5 * len(events) - 1), 6)
    config = json.loads((run / "config.json").read_text())
    assert config["mode"] == "q-learning" and config["config"]["backend"] == "q-learning"
    assert config["learner"]["alpha"] == QLearningOptions().q_alpha == 0.5
    assert config["config"]["q_alpha"] is None  # the mode's own step size (every Q-learning mode's one setting)


def test_its_checkpoint_keeps_no_episodes_for_a_prompt_it_never_builds(tmp_path: Path) -> None:
    """The learner never asks a backend for candidates, so the run keeps none of its episodes for a next prompt:
    they used to pile up in memory and in every checkpoint (1.34 million steps, 32 MB, in each of a Hopper-v5.rich
    run's last checkpoints). A table mode keeps them until its proposer has read them."""
    code, run = train(tmp_path, "--backend", "q-learning", "--iterations", "6", "--heldout-episodes", "3",
                      "--train-episodes", "5", env="Taxi-v4")
    assert code == 0
    pending = load_checkpoint(run / "checkpoint.npz")["pending"]
    assert all(len(v) == 0 for v in pending.values()), pending
    code, table = train(tmp_path, "--backend", "offline", "--iterations", "2", "--heldout-episodes", "3",
                        "--train-episodes", "5", env="Taxi-v4", run_id="table")
    assert code == 0
    assert len(load_checkpoint(table / "checkpoint.npz")["pending"]["lengths"]) > 0


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    cut, ref = kill_and_resume(tmp_path, ["--backend", "q-learning", "--heldout-episodes", "5"], "CliffWalking-v1",
                               iterations=14, after=3)
    assert cut == ref


@pytest.mark.parametrize("args, words", [
    (["--backend", "q-learning", "--mode", "advisor"], "use --backend kept-table-q"),
    (["--backend", "q-learning", "--mode", "reward"], "does not answer --mode reward"),
    (["--mode", "q-learning", "--backend", "offline"], "--mode q-learning proposes nothing and asks no backend"),
])
def test_the_learner_and_its_mode_go_together_or_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             args: list[str], words: str) -> None:
    code, _ = train(tmp_path, *args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and len(err.splitlines()) == 1
    assert not tmp_path.joinpath("CliffWalking-v1").exists()


def test_mode_q_learning_alone_and_backend_q_learning_alone_are_the_same_run(tmp_path: Path) -> None:
    common = ["--iterations", "2", "--heldout-episodes", "3"]
    assert train(tmp_path, "--mode", "q-learning", *common, run_id="by-mode")[0] == 0
    assert train(tmp_path, "--backend", "q-learning", *common, run_id="by-backend")[0] == 0
    by_mode, by_backend = (comparable(tmp_path / "CliffWalking-v1" / r) for r in ("by-mode", "by-backend"))
    assert by_mode == by_backend and by_mode[0]["mode"] == "q-learning"


def test_a_run_directory_of_the_old_q_learning_proposer_resumes_as_kept_table_q(tmp_path: Path) -> None:
    old = tmp_path / "logs" / "FrozenLake-v1" / "old"
    shutil.copytree(OLD_RUN, old)
    recorded = json.loads((old / "config.json").read_text())
    assert recorded["config"]["backend"] == "q-learning" and recorded["mode"] == "table"  # the old record
    assert main(["train", "--resume", str(old), "--iterations", "5", "--no-progress", "--quiet"]) == 0
    assert [e["iteration"] for e in read_jsonl(old / "events.jsonl")] == [1, 2, 3, 4, 5]
    assert train(tmp_path, "--backend", "kept-table-q", "--iterations", "5", "--seed", "2", "--heldout-episodes",
                 "10", env="FrozenLake-v1.deterministic", run_id="fresh")[0] == 0
    resumed, fresh = comparable(old), comparable(tmp_path / "FrozenLake-v1" / "fresh")
    for s in (resumed[0], fresh[0]):  # a checkpoint written before the split was kept does not know it (None)
        s.pop("selection_episodes_total"), s.pop("selection_steps_total")
    assert resumed == fresh and resumed[0]["backend"] == "kept-table-q" and resumed[0]["mode"] == "table"
    lines = read_jsonl(old / "transcripts.jsonl")
    assert {t["backend"] for t in lines if t["iteration"] <= 3} == {"q-learning"}  # the old record is kept
    assert {t["backend"] for t in lines if t["iteration"] > 3} == {"kept-table-q"}


def test_compare_runs_the_standard_learner_and_a_rerun_keeps_its_runs(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--env", "CliffWalking-v1", "--backends", "q-learning", "--seeds", "0", "--iterations", "2",
            "--heldout-episodes", "5",
            "--out", str(tmp_path / "cmp"), "--no-progress"]
    assert main(argv) == 0
    run = tmp_path / "cmp" / "runs" / "CliffWalking-v1" / "q-learning_s0"
    assert json.loads((run / "config.json").read_text())["mode"] == "q-learning"
    before = (run / "summary.json").read_text()
    assert main(argv) == 0, capsys.readouterr().err  # the same command: its finished run is kept, not refused
    assert (run / "summary.json").read_text() == before
    rows = read_results(tmp_path / "cmp" / "results.csv")
    assert [(r.backend, r.mode, r.status) for r in rows] == [("q-learning", "q-learning", "ok")]
