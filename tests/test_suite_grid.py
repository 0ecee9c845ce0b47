"""Settings grids as suites (issue 61, issue 62 item 5): a suite's ``[[grid]]`` expands into methods with stable
labels, ``[choice]`` reads the records on the tuning seeds with the choice rule, an adaptive grid stops a change that
can no longer beat the base, and ``llm-policy-gen bench`` prints and renders the point chosen per task. The old
``bench/tune_specs.py`` and ``bench/qlearning_tune.py`` are these suites now (``tune``, ``qlearning-tune``), their
measured grids imported into ``tune``'s store so that they count as done.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.suites.cells import key_of, settings_of
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import SuiteRecord, append_records, read_records

GRID = """
[[grid]]
search = "coordinate"
entry = "offline"
base = "today"
vary = ["candidates", "test_start"]

[choice]
base = "today"
stop = true
"""


def write_suite(tmp_path: Path, seeds: str = "100-103", grid: str = GRID, budget: int = 4) -> Path:
    path = tmp_path / "tinytune.toml"
    path.write_text(f'[suite]\nname = "tinytune"\nseeds = "{seeds}"\n{grid}\n[[task]]\nkey = "cartpole"\n'
                    f'env_id = "CartPole-v1"\nbudget = {budget}\ngoal = 475.0\n'
                    "settings = { candidates = 2, test_start = 1, test_max = 1, heldout_episodes = 5 }\n",
                    encoding="utf-8")
    return path


def record(suite_path: Path, label: str, seed: int, within: float) -> SuiteRecord:
    """A record of ``label``'s cell on ``seed`` as the runner keys it, judged at ``within``."""
    suite = load_suite(str(suite_path))
    task, spec = suite.tasks[0], suite.method(label)
    budget = {"max_episodes": task.budget}
    return SuiteRecord(suite=suite.name, task=task.key, env_id=task.env_id, method=label, entry=spec.entry, seed=seed,
                       cell=key_of(task, spec, seed, budget), budget=budget, settings=settings_of(task, spec, budget),
                       result={"heldout_mean": within, "heldout_within": within, "episodes": 4, "env_steps": 80,
                               "wall_s": 1.0})


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["bench", *argv, "--list"]) == 0
    return capsys.readouterr().out


def test_a_coordinate_grid_moves_each_setting_alone_around_the_tasks_base(tmp_path: Path) -> None:
    suite = load_suite(str(write_suite(tmp_path)))
    labels = [m.label for m in suite.methods]
    assert labels == ["today", "candidates-half", "candidates-double", "test_start-half", "test_start-double"]
    task, budget = suite.tasks[0], {"max_episodes": 4}
    moved = {m.label: settings_of(task, m, budget) for m in suite.methods}
    assert moved["today"]["candidates"] == 2 and moved["candidates-half"]["candidates"] == 1
    assert moved["candidates-double"] == {**moved["today"], "candidates": 4}
    assert suite.choice is not None and suite.choice.base == "today" and suite.choice.stop


def test_the_base_runs_first_and_a_point_that_is_none_on_the_task_is_listed_with_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = listed(capsys, str(write_suite(tmp_path)), "--out", str(tmp_path / "out"))
    assert "cartpole/today seed 100: to run" in out
    assert "cartpole/candidates-double seed 100: waiting: waits for today's records on every seed" in out
    assert ("cartpole/test_start-half seed 100: not run: not a point of the grid: the same settings as the base on "
            "this task (test_start 1)") in out
    assert "cartpole/test_start-double seed 103: not run: not a point of the grid: test_max 1 below test_start 2" in out
    assert "cartpole (CartPole-v1): not chosen yet on seeds 100-103: 12 cell(s) of the grid still to run" in out
    assert "projected for the cells to run: 12 cells, 48 episodes" in out  # the whole grid: the most it can need
    assert "at least 6 cells of these (the base's, and each change's seeds until its first possible stop)" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("double", "chosen"), [
    ([490.0, 490.0, 490.0, 490.0], "chosen on seeds 100-103: candidates-double (candidates 2 -> 4)"),
    ([481.0, 481.0, 301.0, 301.0], "chosen on seeds 100-103: today (the base kept)"),  # as many met, within noise
])
def test_a_change_stops_once_it_cannot_beat_the_base_and_the_choice_is_the_rules(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], double: list[float], chosen: str) -> None:
    suite, out = write_suite(tmp_path), tmp_path / "out"
    base = [480.0, 480.0, 300.0, 300.0]  # 2 seeds at the goal, 2 missed
    append_records(out, [record(suite, "today", 100 + i, v) for i, v in enumerate(base)]
                   + [record(suite, "candidates-half", 100 + i, 100.0) for i in range(3)]  # 3 missed: stops
                   + [record(suite, "candidates-double", 100 + i, v) for i, v in enumerate(double)])
    text = listed(capsys, str(suite), "--out", str(out))
    assert ("cartpole/candidates-half seed 103: not run: stopped: it missed the goal on 3 of its first 3 seeds, more "
            "than today in all (2)") in text
    assert f"cartpole (CartPole-v1): {chosen}" in text
    assert "0 to run, 0 waiting" in text


def test_a_change_runs_one_seed_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite, out = write_suite(tmp_path), tmp_path / "out"
    append_records(out, [record(suite, "today", 100 + i, 480.0) for i in range(4)]
                   + [record(suite, "candidates-double", 100, 480.0)])
    text = listed(capsys, str(suite), "--out", str(out))
    assert "cartpole/candidates-double seed 101: to run" in text
    assert "cartpole/candidates-double seed 102: waiting: waits for its seed 101's record" in text
    assert "cartpole/candidates-half seed 100: to run" in text


@pytest.mark.parametrize(("seeds", "grid", "argv", "says"), [
    ("0-3", GRID, [], "runs on tuning seeds (100 and up), never on the judged seeds' range 0-99 (seed 0)"),
    ("100-103", GRID, ["--seeds", "5"], "bad --seeds '5': suite tinytune chooses settings, on tuning seeds 100"),
    ("100-103", GRID.replace('vary = ["candidates", "test_start"]', ""), [], "a coordinate grid needs vary"),
    ("100-103", GRID.replace('base = "today"\nstop', 'base = "nosuch"\nstop'), [], "base 'nosuch' is not a method"),
    ("100-103", GRID.replace('"test_start"]', '"explore_epsilon"]'), [], "vary 'explore_epsilon' is not an integer"),
])
def test_a_bad_grid_or_judged_seeds_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            seeds: str, grid: str, argv: list[str], says: str) -> None:
    suite = write_suite(tmp_path, seeds=seeds, grid=grid)
    assert main(["bench", str(suite), "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_product_grid_is_every_combination_with_stable_labels() -> None:
    suite = load_suite("qlearning-tune")
    assert len(suite.methods) == 18 and suite.choice is not None
    assert suite.choice.base == "alpha0.5-eps0.1-over200"
    assert [t.env_id for t in suite.tasks] == ["CartPole-v1", "InvertedPendulum-v5", "MountainCarContinuous-v0",
                                               "MountainCar-v0", "Acrobot-v1", "Pendulum-v1", "Taxi-v4",
                                               "CliffWalking-v1", "FrozenLake-v1.8x8"]
    goals = {t.key: t for t in load_suite("goals").tasks}
    for task in suite.tasks:  # the goal table's budgets and settings: q-learning as the goal table runs it
        assert (task.budget, task.goal, task.settings) == (goals[task.key].budget, goals[task.key].goal,
                                                           goals[task.key].settings)
        assert task.seeds == tuple(range(100, 110))
    cliff = suite.task("cliffwalking")
    got = settings_of(cliff, suite.method("alpha0.1-eps1.0-over50"), {"max_episodes": 300})
    assert (got["q_alpha"], got["q_epsilon_start"], got["q_epsilon_episodes"]) == (0.1, 1.0, 50)


def test_the_tune_suite_is_the_goal_tasks_on_the_tuning_seeds() -> None:
    suite, goals = load_suite("tune"), load_suite("goals")
    assert [t.key for t in suite.tasks] == [t.key for t in goals.tasks]
    for task, goal in zip(suite.tasks, goals.tasks, strict=True):
        assert (task.env_id, task.budget, task.goal, task.exact) == (goal.env_id, goal.budget, goal.goal, goal.exact)
        assert task.seeds == (tuple(range(100, 105)) if len(goal.seeds) == 5 else tuple(range(100, 110)))


def test_the_grids_measured_before_are_done_and_choose_what_they_chose(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path) -> None:
    store = Path(__file__).resolve().parents[1] / "llm_policy_gen" / "suites" / "data" / "tune"
    records = read_records(store)
    assert len(records) == 654 and sum(r.method == "combined" for r in records) == 20  # every run kept
    text = listed(capsys, "tune", "--tasks", "pendulum,hopper,walker2d", "--out", str(tmp_path / "out"))
    assert " 0 to run, 0 waiting" in text and "nothing to run" in text
    assert "pendulum (Pendulum-v1): chosen on seeds 100-109: test_max-double (test_max 8 -> 16)" in text
    assert "hopper (Hopper-v5): chosen on seeds 100-109: confirm_batches-double (confirm_batches 2 -> 4)" in text
    assert "walker2d (Walker2d-v5): chosen on seeds 100-104: today (the base kept)" in text
    missing = listed(capsys, "tune", "--tasks", "cartpole", "--out", str(tmp_path / "out"))
    assert "cartpole/today seed 100: to run: 100 episodes, ~" in missing  # a time per run from the goal table's


@pytest.mark.slow
def test_bench_runs_a_tiny_grid_records_it_and_renders_the_choice(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    grid = GRID.replace('vary = ["candidates", "test_start"]', 'vary = ["candidates"]')
    suite, out = write_suite(tmp_path, seeds="100", grid=grid), tmp_path / "out"
    assert main(["bench", str(suite), "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    got = {r.method: r for r in read_records(out)}
    assert sorted(got) == ["candidates-double", "candidates-half", "today"]  # the base, then the changes
    assert got["candidates-double"].settings["candidates"] == 4 and got["candidates-half"].settings["candidates"] == 1
    base = got["today"].result["heldout_mean"]
    better = [(r.result["heldout_mean"], k) for k, r in got.items() if k != "today" and r.result["heldout_mean"] > base]
    want = max(better)[1] if better else "today"
    line = next(x for x in shown.splitlines() if "cartpole (CartPole-v1): chosen on seeds 100:" in x)
    assert f"chosen on seeds 100: {want} (" in line
    page = (out / "tinytune.md").read_text()
    assert f"Chosen on seeds 100: {want} (" in page and "| candidates-double | candidates 2 -> 4 | 0/1 |" in page
    rows = (out / "tinytune.csv").read_text().splitlines()
    assert rows[0].startswith("task,env_id,point,moves") and len(rows) == 4
    assert main(["bench", str(suite), "--out", str(out)]) == 0  # again: every cell recorded, nothing runs
    assert len(read_records(out)) == 3 and json.loads((out / "records.jsonl").read_text().splitlines()[0])["cell"]
