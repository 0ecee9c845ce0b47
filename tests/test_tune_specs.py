"""bench/tune_specs.py's judgement of a point (issue 32 item 5): the goal table's own measure, each seed's
within-budget held-out mean, and "beats today's" only beyond the seeds' noise. No run is made."""

from __future__ import annotations

import importlib
import json
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def tune(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("tune_specs")


def test_a_point_is_judged_on_the_within_budget_means_not_the_final_ones(tune: ModuleType) -> None:
    """A run whose last iteration, past the budget's check, lifted its final mean to the goal does not meet it."""
    goal = tune.BY_KEY["cartpole"]
    rows = [{"heldout": 500.0, "heldout_within": 500.0}] * 7 + [{"heldout": 500.0, "heldout_within": 300.0}] * 3
    met, iqm, low = tune.judge(goal, rows)
    assert met == 7 and iqm is not None and low is not None and low <= iqm <= 500.0
    assert tune.judge(goal, [{"heldout": 500.0, "heldout_within": None}]) == (0, None, None)


def test_a_change_beats_today_only_on_more_seeds_or_an_interval_above_todays_iqm(tune: ModuleType) -> None:
    today = ({"test_max": 2}, 8, 489.1, 466.1)
    assert tune.beats(({"test_max": 1}, 10, 480.0, 470.0), today)  # more seeds at the goal
    assert not tune.beats(({"test_max": 4}, 7, 499.0, 495.0), today)  # fewer, however high its IQM
    assert tune.beats(({"candidates": 16}, 8, 496.0, 490.0), today)  # as many, interval wholly above 489.1
    assert not tune.beats(({"candidates": 4}, 8, 492.0, 462.0), today)  # as many, within the noise


def test_the_grid_halves_and_doubles_one_setting_at_a_time_and_keeps_test_max_above_test_start(
        tune: ModuleType) -> None:
    base = {"candidates": 8, "train_episodes": 1, "test_start": 1, "test_max": 2, "confirm_episodes": 4,
            "confirm_batches": 2}
    points = tune.single_changes(base)
    assert all(sum(p[k] != base[k] for k in base) == 1 for p in points)
    assert {"test_max": 1} in [{k: v for k, v in p.items() if v != base[k]} for p in points]
    assert not any(p["test_start"] > p["test_max"] for p in points)
    assert {p["candidates"] for p in points} == {4, 8, 16}


def test_a_change_that_can_no_longer_beat_today_stops_and_the_choice_is_the_whole_grids(
        tune: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CartPole-v1 on four tuning seeds, runs faked by their settings: today's meets the goal on all four, so a
    change stops at its first miss; the chosen point and every full point's figures equal the whole grid's."""
    from goal_runs import run_id as _run_id

    def within(settings: dict[str, int]) -> float:
        return {4: 100.0, 16: 500.0}.get(settings["candidates"], 480.0)

    calls: list[tuple[object, int]] = []

    def fake_run_points(jobs: list[tuple[object, int]], out: Path, workers: int) -> dict[tuple[str, int], dict]:
        calls.extend(jobs)
        return {(_run_id(g, "offline", s), s): {"heldout_within": within(dict(g.settings)), "heldout": 0.0}
                for g, s in jobs}

    monkeypatch.setattr(tune, "run_points", fake_run_points)
    goal, seeds = tune.BY_KEY["cartpole"], [100, 101, 102, 103]
    pruned = tune.tune(goal, seeds, tmp_path, 1)
    pruned_runs = len(calls)
    calls.clear()
    whole = tune.tune(goal, seeds, tmp_path, 1, full=True)
    assert pruned["chosen"] == whole["chosen"] and pruned["changed"] == {"candidates": 16}
    halved = [p for p in pruned["points"] if p["settings"]["candidates"] == 4]
    assert halved[0]["stopped_after"] == 1 and halved[0]["met"] == 0 and not halved[0]["beats_today"]
    assert pruned_runs == len(calls) - (len(seeds) - 1)
    full_points = [p for p in pruned["points"] if "stopped_after" not in p]
    assert full_points == [p for p in whole["points"] if p["settings"]["candidates"] != 4]
    assert "stopped" in Path(tune.write_report(tmp_path, [pruned])).read_text()


def test_where_both_values_of_a_setting_beat_today_the_combined_point_takes_the_better(
        tune: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CartPole-v1 (candidates 8 today), runs faked by their settings: halving and doubling the candidates both beat
    today's, halving by more; with a third change that beats it, the combined point halves them."""
    from goal_runs import run_id as _run_id

    def within(settings: dict[str, int]) -> float:
        if settings["candidates"] != 8:
            return {4: 500.0, 16: 480.0}[settings["candidates"]]
        return 490.0 if settings["train_episodes"] == 2 else 400.0

    monkeypatch.setattr(tune, "run_points", lambda jobs, out, workers: {
        (_run_id(g, "offline", s), s): {"heldout_within": within(dict(g.settings)), "heldout": 0.0} for g, s in jobs})
    result = tune.tune(tune.BY_KEY["cartpole"], [100, 101, 102, 103], tmp_path, 1)
    base = result["today"]
    changed = [{k: v for k, v in p["settings"].items() if v != base[k]} for p in result["points"]]
    assert changed[-1] == {"candidates": 4, "train_episodes": 2}
    assert result["changed"]["candidates"] == 4
    # the entry names its runs; their records are tune_runs.json's alone
    assert "records" not in result and len(result["runs"]) == len(set(result["runs"])) == 4 * len(result["points"])


def test_an_older_tune_json_gives_its_run_records_to_tune_runs_json_and_loses_none(
        tune: ModuleType, tmp_path: Path) -> None:
    """An entry written before tune_runs.json existed held its runs' records: lifting moves them (the copy marked
    reused too) into tune_runs.json, leaves their ids in the entry, and the runs read back are the same."""
    def rec(name: str, **more: object) -> dict[str, object]:
        return {"run_dir": f"/gone/{name}", "heldout": 1.0, **more}

    (tmp_path / "tune.json").write_text(json.dumps({
        "pendulum": {"task": "pendulum", "points": [], "records": [rec("a"), rec("b-2"), {"run_dir": "/gone/c"}]},
        "swimmer": {"task": "swimmer", "points": [], "records": [rec("d", reused=True)]},
        "acrobot": {"task": "acrobot", "points": [], "runs": ["e"]}}))
    (tmp_path / tune.RUNS_FILE).write_text(json.dumps([rec("d"), rec("e")]))
    before = tune.kept_runs(tmp_path)
    tune.lift(tmp_path)
    entries = json.loads((tmp_path / "tune.json").read_text())
    assert {k: v.get("runs") for k, v in entries.items()} == {"pendulum": ["a", "b", "c"], "swimmer": ["d"],
                                                              "acrobot": ["e"]}
    assert not any("records" in v for v in entries.values())
    assert sorted(tune.run_name(r) for r in json.loads((tmp_path / tune.RUNS_FILE).read_text())) == \
        ["a", "b", "d", "e"]
    assert tune.kept_runs(tmp_path) == {k: {x: y for x, y in v.items() if x != "reused"} for k, v in before.items()}


def _waits_for_a_lock(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside filelock's ``acquire`` now (or has ended)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "acquire" and "filelock" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return not thread.is_alive()


def test_lifting_reads_tune_json_under_its_lock_and_keeps_an_entry_written_before_it(
        tune: ModuleType, tmp_path: Path) -> None:
    """Another invocation rewrites a task's entry while lifting waits for tune.json's lock: lifting reads the file
    once it holds the lock, so the new entry stays (not the lean copy of the old one), and a file with nothing to
    lift is not rewritten."""
    from filelock import FileLock

    store = tmp_path / "tune.json"
    store.write_text(json.dumps({"pendulum": {"task": "pendulum", "points": [],
                                              "records": [{"run_dir": "/gone/a", "heldout": 1.0}]}}))
    newer = {"pendulum": {"task": "pendulum", "points": [1], "runs": ["a", "z"]}}
    with FileLock(str(store) + ".lock"):
        lifting = threading.Thread(target=tune.lift, args=(tmp_path,))
        lifting.start()
        while not _waits_for_a_lock(lifting):  # lifting has read what it reads outside the lock, if anything
            lifting.join(timeout=0.01)
        store.write_text(json.dumps(newer))  # the other invocation, holding the lock
    lifting.join(timeout=60)
    assert not lifting.is_alive()
    assert json.loads(store.read_text()) == newer
    assert not (tmp_path / tune.RUNS_FILE).exists()
    stamp = store.stat().st_mtime_ns
    tune.lift(tmp_path)
    assert store.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("argv, says", [
    (["--tasks", "nope"], "unknown task 'nope'"),
    (["--tasks", "cartpole", "--seeds", "x"], "bad --seeds 'x'"),
    (["--tasks", "cartpole", "--seeds", "105-101"], "is empty"),
    (["--tasks", "cartpole", "--seeds", "0-4"], "tuning seeds start at 100"),
    (["--tasks", "cartpole", "--workers", "0"], "--workers must be at least 1"),
    (["--report-only"], "no "),
])
def test_a_bad_argument_is_one_line_and_exit_2_and_writes_nothing(
        tune: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    out = tmp_path / "out"
    assert tune.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_two_invocations_on_one_out_keep_each_others_tasks(
        tune: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one invocation tunes CartPole-v1, another finishes Acrobot-v1 into the same --out: both entries stay
    (each replaces only its own task's entry, under the file's lock)."""
    import results_file

    def fake_tune(goal, seeds, out, workers, full=False):  # type: ignore[no-untyped-def]
        if goal.key == "cartpole":  # the other invocation writes meanwhile
            results_file.merge_entries(out / "tune.json", {"acrobot": {"task": "acrobot", "points": []}})
        return {"task": goal.key, "points": []}

    monkeypatch.setattr(tune, "tune", fake_tune)
    monkeypatch.setattr(tune, "write_report", lambda out, results: out / "tune_specs.md")
    assert tune.main(["--tasks", "cartpole", "--out", str(tmp_path)]) == 0
    assert set(json.loads((tmp_path / "tune.json").read_text())) == {"acrobot", "cartpole"}


@pytest.mark.slow
def test_a_search_goes_on_in_a_fresh_folder_from_the_kept_run_records(
        tune: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each finished run's record lands in OUT/tune_runs.json as it ends; a fresh OUT holding only a copy of that
    file (the run folders lost with a machine) reads those runs back, runs only the others, and keeps them all."""
    import shutil

    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    goal = tune.Goal("tiny", "CartPole-v1", 4, 475, "", "")
    first, fresh = tmp_path / "first", tmp_path / "fresh"
    got = tune.run_points([(goal, 100)], first, 1)
    kept = json.loads((first / tune.RUNS_FILE).read_text())
    assert [r["seed"] for r in kept] == [100] and kept[0]["heldout"] == next(iter(got.values()))["heldout"]

    fresh.mkdir()
    shutil.copy(first / tune.RUNS_FILE, fresh / tune.RUNS_FILE)
    again = tune.run_points([(goal, 100), (goal, 101)], fresh, 1)
    assert again[next(iter(got))]["reused"] and again[next(iter(got))]["heldout"] == kept[0]["heldout"]
    assert [p.name for p in (fresh / "runs" / "CartPole-v1").iterdir()] == ["tiny_b4_offline_s101"]
    assert sorted(r["seed"] for r in json.loads((fresh / tune.RUNS_FILE).read_text())) == [100, 101]


def test_the_plan_counts_the_kept_runs_and_projects_the_rest_at_the_tasks_own_cost(
        tune: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--plan runs nothing: today's point of CartPole-v1 kept on four tuning seeds (two missed the goal, 10 CPU s each)
    leaves every change to run; the least the early stop needs is three seeds a change (one more than today's
    misses), the whole grid four. A task with no recorded run is 'unknown', not guessed."""
    from goal_runs import run_id as _run_id

    goal, seeds = tune.BY_KEY["cartpole"], [100, 101, 102, 103]
    out = tmp_path / "tune"
    out.mkdir()
    within = [500.0, 480.0, 300.0, 200.0]
    kept = [{"task": "cartpole", "seed": s, "cpu_s": 10.0, "heldout": w, "heldout_within": w,
             "run_dir": f"/gone/{_run_id(goal, 'offline', s)}"} for s, w in zip(seeds, within, strict=True)]
    (out / tune.RUNS_FILE).write_text(json.dumps(kept))
    changes = len(tune.single_changes(tune.today(goal)))
    assert tune.main(["--tasks", "cartpole,walker2d", "--seeds", "100-103", "--plan", "--out", str(out),
                      "--suite-results", str(tmp_path / "none.json")]) == 0
    page = (out / "tune_plan.md").read_text()
    assert page == capsys.readouterr().out
    whole, least = changes * 4, changes * 3
    row = next(line for line in page.splitlines() if line.startswith("| cartpole"))
    assert row == (f"| cartpole (CartPole-v1) | 100-103 | {changes + 1} | 4/4, 2 missed | 4 | {whole} | {least} | 10 | "
                   f"tuning runs (4) | {whole * 10 / 3600:,.1f} | {least * 10 / 3600:,.1f} |")
    assert "| walker2d (Walker2d-v5) |" in page and "unknown: no run of this task recorded" in page
    # the grid so far, read from the records: today's four seeds (bold at the goal, 475), the changes not run yet;
    # Walker2d-v5 has no kept run, so no table
    table = page.split("## cartpole (CartPole-v1): the grid so far")[1].strip().splitlines()[2:]
    assert table[0] == "| point | seeds met / run | 100 | 101 | 102 | 103 |"
    assert table[2] == "| today's | 2/4 | **500.0** | **480.0** | 300.0 | 200.0 |"
    assert len(table) == 2 + changes + 1 and all(line.endswith("| 0/0 | - | - | - | - |") for line in table[3:])
    first = tune.single_changes(tune.today(goal))[0]
    moved = next(k for k, v in first.items() if v != tune.today(goal)[k])
    assert table[3].startswith(f"| {moved} {tune.today(goal)[moved]} -> {first[moved]} |")
    assert "## walker2d" not in page
    assert not (out / "runs").exists() and not (out / "tune.json").exists()


def test_the_least_counts_a_change_that_has_met_the_goal_so_far_as_still_to_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's point missed 2 of 4 seeds, so a change stops at its 3rd miss. Each change's fewest runs left: met on
    both its seeds, 2 (its seeds left, all misses, cannot reach 3); one miss in two, 2; three misses, 0 (stopped); met
    on all four, 0; not begun, 3. Counting kept runs as misses (the plan before) said 1, 1, 0, 0, 3."""
    monkeypatch.syspath_prepend(str(BENCH))
    plan = importlib.import_module("tune_plan")
    scores = {"t0": 1, "t1": 1, "t2": 0, "t3": 0, "a0": 1, "a1": 1, "b0": 0, "b1": 1, "c0": 0, "c1": 0, "c2": 0,
              "d0": 1, "d1": 1, "d2": 1, "d3": 1}
    kept = {rid: {"met": met, "cpu_s": 60.0, "heldout": 1.0, "task": "x"} for rid, met in scores.items()}
    grid = plan.Grid("x", "X-v0", (100, 101, 102, 103),
                     tuple(tuple(f"{p}{i}" for i in range(4)) for p in "tabcde"), lambda r: not r["met"])
    line, whole, least = plan.row(grid, kept, (60.0, "tuning runs"))
    # today's point, runs kept, runs left for the whole grid (6 points x 4 seeds - 15) and the least (2+2+0+0+3)
    assert line.split(" | ")[3:7] == ["4/4, 2 missed", "15", "9", "7"]
    assert least == pytest.approx(7 * 60 / 3600) and whole == pytest.approx(9 * 60 / 3600)


def test_the_runs_kept_are_the_finished_tasks_and_the_run_records(tune: ModuleType, tmp_path: Path) -> None:
    """A task finished before tune_runs.json existed keeps its runs in tune.json's records: both are read back (a
    failed run in neither), so a fresh folder with copies of the two runs none of them again."""
    def rec(name: str, **more: object) -> dict[str, object]:
        return {"run_dir": f"/gone/{name}", "heldout": 1.0, **more}

    (tmp_path / "tune.json").write_text(json.dumps({"pendulum": {"records": [rec("a"), {"run_dir": "/gone/b"}]}}))
    (tmp_path / tune.RUNS_FILE).write_text(json.dumps([rec("c"), rec("a", heldout=2.0)]))
    kept = tune.kept_runs(tmp_path)
    assert sorted(kept) == ["a", "c"] and kept["a"]["heldout"] == 2.0


def test_a_run_killed_before_its_first_checkpoint_starts_over_in_its_own_folder(
        tune: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A try killed before its first checkpoint leaves the run id's folder with its configuration and no iteration:
    the next try resumes that folder, which starts the run over there, to the uninterrupted run's result."""
    import shutil

    suite = importlib.import_module("goal_runs")
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    goal = tune.Goal("tiny", "CartPole-v1", 4, 475, "", "")
    whole = suite.run_one(goal, "offline", 100, tmp_path / "whole")
    left = tmp_path / "cut" / "runs" / "CartPole-v1" / "tiny_b4_offline_s100"
    left.mkdir(parents=True)
    shutil.copy(Path(whole["run_dir"]) / "config.json", left / "config.json")
    rec = next(iter(tune.run_points([(goal, 100)], tmp_path / "cut", 1).values()))
    assert rec["run_dir"] == str(left) and rec["resumed"] and rec["heldout"] == whole["heldout"]
    assert [p.name for p in left.parent.iterdir()] == ["tiny_b4_offline_s100"]


def test_a_run_made_beside_a_left_folder_is_its_ids_and_read_back(
        tune: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder the run cannot resume (no configuration in it) makes ``train`` put the run in ``RUN_ID-2``, as the
    suite did before it resumed such folders: that run is the id's, read back by the search and by the suite after,
    never made a third time."""
    suite = importlib.import_module("goal_runs")
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    goal = tune.Goal("tiny", "CartPole-v1", 4, 475, "", "")
    left = tmp_path / "runs" / "CartPole-v1" / "tiny_b4_offline_s100"
    left.mkdir(parents=True)
    rec = next(iter(tune.run_points([(goal, 100)], tmp_path, 1).values()))
    assert Path(rec["run_dir"]).name == "tiny_b4_offline_s100-2" and rec["heldout"] is not None
    assert tune.run_name(rec) == "tiny_b4_offline_s100"
    again = next(iter(tune.run_points([(goal, 100)], tmp_path, 1).values()))
    assert again["reused"] and again["heldout"] == rec["heldout"]
    (tmp_path / tune.RUNS_FILE).unlink()  # the records gone, the folders kept: the suite finds the run by its id
    found = suite.run_one(goal, "offline", 100, tmp_path)
    assert found["reused"] and found["run_dir"] == rec["run_dir"] and found["heldout"] == rec["heldout"]
    assert sorted(p.name for p in left.parent.iterdir()) == ["tiny_b4_offline_s100", "tiny_b4_offline_s100-2"]


def test_a_run_ids_folders_are_its_own_in_the_order_train_made_them(tune: ModuleType, tmp_path: Path) -> None:
    suite = importlib.import_module("goal_runs")
    for name in ("t_b4_offline_s1", "t_b4_offline_s1-10", "t_b4_offline_s1-2", "t_b4_offline_s10",
                 "t_b4_offline_s10-2", "t_b4_offline_s1_learner", "t_b4_offline_s1_learner-2"):
        (tmp_path / "Env-v1" / name).mkdir(parents=True)
    assert [p.name for p in suite.run_folders(tmp_path, "t_b4_offline_s1")] == \
        ["t_b4_offline_s1", "t_b4_offline_s1-2", "t_b4_offline_s1-10"]
    assert suite.run_id_of(tmp_path / "Env-v1" / "t_b4_offline_s1_learner-2") == "t_b4_offline_s1_learner"
