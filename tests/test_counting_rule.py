"""One counting rule and one selection rule for every method (issue 62 items 1-2).

On CartPole-v1 every step returns 1, so an episode's return is its length: the steps of every episode a run lists in
``events.jsonl`` can be added up from its returns. For ``offline``, ``q-learning``, the language-model policy and a
peer, the counted steps are exactly the steps of the training episodes plus those of the episodes that chose the
reported policy (the keeper's, a peer's evaluations), and held-out episodes are never among them; with
``--select none`` the q-learner learns on every charged step.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_lm_policy import needs_extra, one_line

from llm_policy_gen.cli import main
from llm_policy_gen.modes.selection import heldout_due
from llm_policy_gen.peers import EXTRA_MODULES as PEER_MODULES
from llm_policy_gen.run.files import RunDir, RunView
from llm_policy_gen.suites.harvest import result_of

FIXTURES = Path(__file__).parent / "data" / "rundirs_v1"


def _train(tmp_path: Path, *args: str) -> RunView:
    logs = tmp_path / "logs"
    assert main(["train", "--env", "CartPole-v1", "--logs-dir", str(logs), "--run-id", "r", "--no-plots",
                 "--no-progress", "--heldout-episodes", "10", "--seed", "0", *args]) == 0
    return RunDir(logs / "CartPole-v1" / "r").read()


def _counted(view: RunView) -> dict[str, Any]:
    """The counting rule from the run's records alone; returns the summary."""
    s, events = view.summary, view.events
    assert s["episodes_total"] == events[-1]["episodes_total"] and s["env_steps_total"] == events[-1]["env_steps_total"]
    train_steps = sum(sum(e["train_returns"]) for e in events)  # CartPole: a return is a length
    train_episodes = sum(len(e["train_returns"]) for e in events)
    # every counted episode is a training episode or one that chose the reported policy, and nothing else
    assert train_steps + s["selection_steps_total"] == s["env_steps_total"]
    assert train_episodes + s["selection_episodes_total"] == s["episodes_total"]
    assert s["heldout_episodes_total"] >= 10  # measured, and never among the counted ones (the sums above)
    assert s["final_heldout_mean"] is not None and s["counting"]
    return s


def test_offline_counts_its_training_and_keeper_episodes(tmp_path: Path) -> None:
    s = _counted(_train(tmp_path, "--backend", "offline", "--iterations", "3"))
    assert s["select"] == "keeper" and s["selection_episodes_total"] > 0
    assert s["final_heldout_mean"] == s["selected_heldout_mean"] == s["best_heldout_mean"]  # the keeper is the method


def test_q_learning_learns_from_every_episode_it_is_charged_for(tmp_path: Path) -> None:
    view = _train(tmp_path, "--mode", "q-learning", "--iterations", "4")
    s = _counted(view)
    assert s["select"] == "keeper" and s["selection_episodes_total"] > 0
    assert s["learner_episodes"] + s["learner_keeper_episodes"] == s["episodes_total"]
    assert s["learner_episodes"] == s["episodes_total"] - s["selection_episodes_total"]
    assert view.settings["q_learns_from"] == "all" and s["selected_heldout_mean"] == s["best_heldout_mean"]
    assert s["final_heldout_mean"] is not None


def test_q_learning_with_select_none_learns_on_every_charged_step(tmp_path: Path) -> None:
    view = _train(tmp_path, "--mode", "q-learning", "--iterations", "40", "--select", "none")
    s = _counted(view)
    assert s["select"] == "none" and s["selection_episodes_total"] == s["selection_steps_total"] == 0
    assert s["learner_updates"] == s["env_steps_total"] and s["learner_episodes"] == s["episodes_total"]
    assert s["selected_heldout_mean"] is None and s["final_heldout_mean"] == s["best_heldout_mean"]
    assert all(e["test_returns"] == [] and e["candidate_means"] == [] for e in view.events)  # no keeper episode
    # the held-out curve: the initial table, then 20 points over 40 iterations (2, 4, ..., 40), never counted
    assert [e["heldout_iteration"] for e in view.events] == [None if i % 2 else i for i in range(1, 41)]
    assert s["heldout_episodes_total"] == 21 * 10 and s["best_iteration"] == 40


def test_the_held_out_cadence_is_a_stated_number_of_points() -> None:
    assert [i for i in range(1, 31) if heldout_due(i, 30)] == sorted({(k * 30 + 19) // 20 for k in range(1, 21)})
    assert sum(heldout_due(i, 30) for i in range(1, 31)) == 20 and heldout_due(30, 30)
    assert all(heldout_due(i, 5) for i in range(1, 6))


@needs_extra
@pytest.mark.slow
def test_the_language_model_policy_counts_its_rollouts_and_the_keeper(tmp_path: Path) -> None:
    from test_lm_identity import FAST, tiny_model

    model = tiny_model(tmp_path / "model")
    for select in ("keeper", "none"):
        view = _train(tmp_path / select, "--mode", "lm-policy", "--lm-model", str(model), "--lm-cache",
                      str(tmp_path / "cache"), *FAST, "--iterations", "3", "--select", select)
        s = _counted(view)
        counted_training = s["env_steps_total"] - s["selection_steps_total"]
        # every step its learner took is counted, or belongs to an episode still in progress when the run ended
        assert counted_training + s["steps_in_progress"] == s["lm_steps"] == 3 * 32
        # a suite's record charges them all: every step the learner took, and the keeper's
        assert result_of(view)["env_steps"] == s["env_steps_total"] + s["steps_in_progress"]
        assert s["select"] == select and "on-policy" in s["counting"]
        assert (s["selection_episodes_total"] > 0) == (select == "keeper")


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in PEER_MODULES), reason="the peers extra is not "
                    "installed")
@pytest.mark.slow
def test_a_peer_counts_its_evaluations_on_training_seeds(tmp_path: Path) -> None:
    view = _train(tmp_path, "--mode", "peer", "--peer-algo", "ppo", "--max-steps", "512", "--iterations", "2",
                  "--peer-select", "eval", "--peer-eval-episodes", "2")
    s = _counted(view)
    assert s["select"] == "eval" and s["selection_episodes_total"] == 2 * 2
    assert s["selection_steps_total"] == sum(sum(e["peer_eval_returns"]) for e in view.events)
    assert s["env_steps_total"] - s["selection_steps_total"] + s["steps_in_progress"] == s["peer_steps"] == 512
    assert result_of(view)["env_steps"] == 512 + s["selection_steps_total"]  # a suite's record charges them all
    assert s["selected_heldout_mean"] is not None and s["final_heldout_mean"] == s["best_heldout_mean"]
    seeds = json.loads((RunDir(view.path).config).read_text())["seeds"]
    assert seeds  # evaluation seeds come from the training range (the plan), never the held-out one


@pytest.mark.parametrize(("args", "says"), [
    (["--backend", "offline", "--select", "none"], "bad --select none for --mode table"),
    (["--mode", "q-learning", "--select", "none", "--patience", "3"], "--patience 3 counts iterations"),
])
def test_a_select_a_mode_cannot_take_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          args: list[str], says: str) -> None:
    logs = tmp_path / "logs"
    assert main(["train", "--env", "CartPole-v1", "--logs-dir", str(logs), "--iterations", "1", *args]) == 2
    assert says in one_line(capsys.readouterr().err)
    assert not logs.exists()


def test_an_old_q_learning_run_keeps_learning_from_its_own_episodes(tmp_path: Path) -> None:
    """A config.json without q_learns_from means the behaviour before it: an old run resumes as it ran."""
    run = tmp_path / "q"
    shutil.copytree(FIXTURES / "logs" / "FrozenLake-v1" / "qlearning", run)
    assert "q_learns_from" not in json.loads((run / "config.json").read_text())["config"]
    assert RunDir(run).read().settings["q_learns_from"] == "own"
    before = json.loads((run / "summary.json").read_text())
    assert main(["train", "--resume", str(run), "--iterations", str(before["iterations"] + 1), "--no-plots"]) == 0
    after = json.loads((run / "summary.json").read_text())
    assert after["learner_keeper_episodes"] == 0 and after["select"] == "keeper"


def test_the_results_table_has_a_final_and_a_selected_column(tmp_path: Path) -> None:
    from llm_policy_gen.sweep.results import read_results

    out = tmp_path / "cmp"
    assert main(["compare", "--env", "CartPole-v1", "--backends", "offline,q-learning", "--seeds", "0", "--iterations",
                 "2", "--heldout-episodes", "10", "--out", str(out)]) == 0
    rows = {r.backend: r for r in read_results(out / "results.csv")}
    assert rows["offline"].final_heldout_mean == rows["offline"].selected_heldout_mean == rows[
        "offline"].best_heldout_mean
    q = rows["q-learning"]
    assert q.selected_heldout_mean == q.best_heldout_mean and q.final_heldout_mean is not None


def test_an_old_run_reads_its_final_and_selected_policy_in_todays_words() -> None:
    table = RunDir(FIXTURES / "logs" / "CartPole-v1" / "table").read()
    assert table.final_heldout_mean == table.selected_heldout_mean == table.summary["best_heldout_mean"]
    q = RunDir(FIXTURES / "logs" / "FrozenLake-v1" / "qlearning").read()
    assert q.final_heldout_mean is None and q.selected_heldout_mean == q.summary["best_heldout_mean"]
