"""``bench/goal_runs.py``'s runs (still used by ``bench/lm_features.py``'s ``offline`` rows; moved here from the
settings search's tests when ``bench/tune_specs.py`` became the ``tune`` suite): a run is read back when finished,
resumed when a try left its folder, and a run id's folders are found in the order ``train`` made them."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import pytest
from run_helpers import bench_module


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")  # run_one sets it for its process: undone after the test
    return bench_module(monkeypatch, "goal_runs")


def test_a_run_killed_before_its_first_checkpoint_starts_over_in_its_own_folder(runs: ModuleType,
                                                                                tmp_path: Path) -> None:
    """A try killed before its first checkpoint leaves the run id's folder with its configuration and no iteration:
    the next try resumes that folder, which starts the run over there, to the uninterrupted run's result."""
    goal = runs.Goal("tiny", "CartPole-v1", 4, 475, "", "")
    whole = runs.run_one(goal, "offline", 100, tmp_path / "whole")
    left = tmp_path / "cut" / "runs" / "CartPole-v1" / "tiny_b4_offline_s100"
    left.mkdir(parents=True)
    shutil.copy(Path(whole["run_dir"]) / "config.json", left / "config.json")
    rec = runs.run_one(goal, "offline", 100, tmp_path / "cut")
    assert rec["run_dir"] == str(left) and rec["resumed"] and rec["heldout"] == whole["heldout"]
    assert [p.name for p in left.parent.iterdir()] == ["tiny_b4_offline_s100"]


def test_a_run_made_beside_a_left_folder_is_its_ids_and_read_back(runs: ModuleType, tmp_path: Path) -> None:
    """A folder the run cannot resume (no configuration in it) makes ``train`` put the run in ``RUN_ID-2``: that run
    is the id's, read back after, never made a third time."""
    goal = runs.Goal("tiny", "CartPole-v1", 4, 475, "", "")
    left = tmp_path / "runs" / "CartPole-v1" / "tiny_b4_offline_s100"
    left.mkdir(parents=True)
    rec = runs.run_one(goal, "offline", 100, tmp_path)
    assert Path(rec["run_dir"]).name == "tiny_b4_offline_s100-2" and rec["heldout"] is not None
    assert runs.run_id_of(rec["run_dir"]) == "tiny_b4_offline_s100"
    again = runs.run_one(goal, "offline", 100, tmp_path)
    assert again["reused"] and again["run_dir"] == rec["run_dir"] and again["heldout"] == rec["heldout"]
    assert sorted(p.name for p in left.parent.iterdir()) == ["tiny_b4_offline_s100", "tiny_b4_offline_s100-2"]


def test_a_run_ids_folders_are_its_own_in_the_order_train_made_them(runs: ModuleType, tmp_path: Path) -> None:
    for name in ("t_b4_offline_s1", "t_b4_offline_s1-10", "t_b4_offline_s1-2", "t_b4_offline_s10",
                 "t_b4_offline_s10-2", "t_b4_offline_s1_learner", "t_b4_offline_s1_learner-2"):
        (tmp_path / "Env-v1" / name).mkdir(parents=True)
    assert [p.name for p in runs.run_folders(tmp_path, "t_b4_offline_s1")] == \
        ["t_b4_offline_s1", "t_b4_offline_s1-2", "t_b4_offline_s1-10"]
    assert runs.run_id_of(tmp_path / "Env-v1" / "t_b4_offline_s1_learner-2") == "t_b4_offline_s1_learner"
