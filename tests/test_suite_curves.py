"""The suite's curves, figures, profiles and interval tables (issue 32 item 3), on tiny synthetic results: a figure
per task and the performance profiles exist as images, ``curves.csv`` holds exactly the points of the runs' events,
of the peers' records and of the zero-episode prior, and ``suite.md`` shows rliable's IQM with its interval for the
records' values, never a ratio of returns."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from llm_policy_gen.plotting.stats import iqm_interval, normalized

BENCH = Path(__file__).resolve().parent.parent / "bench"
PNG = b"\x89PNG\r\n\x1a\n"
SEEDS = range(3)
RANDOM_R, PRIOR_R = 20.0, 200.0


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    mods = {name: importlib.import_module(name) for name in ("suite", "suite_curves", "suite_scores", "peers")}
    monkeypatch.setattr(mods["suite_curves"], "CURVE_RESAMPLES", 20)  # the figure's bands: few resamples suffice
    return mods


def _events(seed: int, base: float) -> list[dict]:
    return [{"iteration": i, "episodes_total": 10 * i, "env_steps_total": 900 * i + seed,
             "best_eval_mean": base + 10 * i + seed} for i in range(1, 5)]


def _write(out: Path) -> tuple[list[dict], list[dict]]:
    """A suite folder: offline and q-learning on CartPole-v1 (events on disk), PPO peers with curves, and the
    random policy's and the prior's scores as if measured (so that nothing is measured)."""
    records = []
    for backend, base in (("offline", 400.0), ("q-learning", 100.0)):
        for seed in SEEDS:
            run = out / "runs" / "CartPole-v1" / f"cartpole_b100_{backend}_s{seed}"
            run.mkdir(parents=True)
            events = _events(seed, base)
            (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
            records.append({"task": "cartpole", "env_id": "CartPole-v1", "backend": backend, "seed": seed,
                            "budget": 100, "settings": {}, "run_dir": str(run), "heldout": events[-1]["best_eval_mean"],
                            "episodes": 40, "env_steps_total": events[-1]["env_steps_total"], "iterations": 4,
                            "wall_s": 1.0, "cpu_s": 1.0, "heldout_within": events[-1]["best_eval_mean"],
                            "episodes_within": 40, "reached_at": None, "stop": "max_episodes"})
    peers = [{"task": "cartpole", "env_id": "CartPole-v1", "algo": "ppo", "seed": s, "kind": "steps",
              "hyperparameters": "rl-zoo3 2.9.2 ppo.yml CartPole-v1", "heldout": 150.0 + s, "steps": 3600,
              "episodes": 60, "reached": True, "curve": [[1800, 30, 50.0 + s], [3600, 60, 140.0 + s]]} for s in SEEDS]
    peers.append({**peers[0], "seed": 3, "reached": False, "heldout": None, "out_of_reach": "needs 9 CPU-h"})
    steps = {r["seed"]: r["env_steps_total"] for r in records if r["backend"] == "offline"}
    for p in peers:  # trained to offline's count of the seed (a peer of another count is a stale cell)
        p["target"] = steps.get(p["seed"])
    (out / "results.json").write_text(json.dumps(records))
    (out / "peers.json").write_text(json.dumps(peers))
    for name, value in (("random_policy.json", RANDOM_R), ("priors.json", PRIOR_R)):
        (out / name).write_text(json.dumps({"heldout_episodes": 100, "tasks": {
            "cartpole": {"env_id": "CartPole-v1", "by_seed": {str(s): value + s for s in SEEDS}}}}))
    return records, peers


def test_figures_and_curve_data_match_the_records(bench, tmp_path: Path) -> None:
    suite, peers_mod = bench["suite"], bench["peers"]
    out = tmp_path / "suite"
    records, peers = _write(out)
    page = suite.write_report(out, note="synthetic", peers=peers_mod.cells(peers))
    for image in ("curves_cartpole.png", "profiles.png"):
        assert (out / "img" / image).read_bytes()[:8] == PNG
    assert not any((out / "img").glob("curves_taxi*"))  # no figure for a task without runs

    with (out / "curves.csv").open() as f:
        rows = list(csv.DictReader(f))
    got: dict[tuple[str, int], list[tuple[int, int, float]]] = {}
    for row in rows:
        assert row["task"] == "cartpole"
        got.setdefault((row["method"], int(row["seed"])), []).append(
            (int(row["env_steps"]), int(row["episodes"]), float(row["heldout_mean"])))
    for r in records:  # every iteration of every suite run, in order
        want = [(e["env_steps_total"], e["episodes_total"], e["best_eval_mean"]) for e in _events(r["seed"], 0.0)]
        want = [(s, e, v + (400.0 if r["backend"] == "offline" else 100.0)) for s, e, v in want]
        assert got[(r["backend"], r["seed"])] == want
    for p in peers[:3]:  # the curve points, then the final held-out mean; the unreached seed has no curve
        assert got[("PPO = steps", p["seed"])] == [(1800, 30, 50.0 + p["seed"]), (3600, 60, 140.0 + p["seed"]),
                                                   (3600, 60, p["heldout"])]
    assert ("PPO = steps", 3) not in got
    assert all(got[("prior, 0 episodes", s)] == [(0, 0, PRIOR_R + s)] for s in SEEDS)

    text = page.read_text()
    offline = [r["heldout"] for r in records if r["backend"] == "offline"]
    norm = normalized(offline, [RANDOM_R + s for s in SEEDS], 475.0)
    assert norm is not None
    row = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | offline |"))
    assert f"**{iqm_interval(offline).format(1)}** | {iqm_interval(norm).format(2)} |" in row
    assert "img/curves_cartpole.png" in text and "img/profiles.png" in text
    assert "x offline" not in text and "ratio to" not in text and "×" not in text
    with (out / "profiles.csv").open() as f:
        prof = [r for r in csv.DictReader(f) if r["method"] == "offline"]
    # offline's normalised scores are all about 0.85-0.86: every run above 0.5, none above 1
    at = {float(r["tau"]): float(r["fraction"]) for r in prof}
    assert at[0.5] == 1.0 and at[1.0] == 0.0 and all(r["tasks"] == "cartpole" and r["seeds"] == "3" for r in prof)


def test_a_curves_csv_reads_back_as_the_runs(bench, tmp_path: Path) -> None:
    curves = bench["suite_curves"]
    out = tmp_path / "suite"
    records, peers = _write(out)
    runs = curves.suite_runs(records) + curves.peer_runs(peers)
    back = {(r.task, r.method, r.seed): r for r in curves.read_csv(curves.write_csv(tmp_path / "c.csv", runs))}
    for r in runs:
        b = back[(r.task, r.method, r.seed)]
        assert (b.steps, b.episodes, b.values, b.final) == (r.steps, r.episodes, r.values, r.final)


def test_records_keep_their_curves_when_the_run_folders_are_gone(bench, tmp_path: Path) -> None:
    """A suite folder's top-level files are the record: with the curves kept in results.json, the report draws the
    same curve data after the run folders are deleted (a new machine)."""
    import shutil

    curves, suite = bench["suite_curves"], bench["suite"]
    out = tmp_path / "suite"
    records, _ = _write(out)
    for r in records:
        events = [json.loads(line) for line in (Path(r["run_dir"]) / "events.jsonl").read_text().splitlines()]
        r["curve"] = curves.curve_of(events)
    (out / "results.json").write_text(json.dumps(records))
    suite.write_report(out, "with the run folders")
    before = (out / "curves.csv").read_text()
    shutil.rmtree(out / "runs")
    suite.write_report(out, "without them")
    assert (out / "curves.csv").read_text() == before
    assert len([line for line in before.splitlines() if line.startswith("cartpole,offline,")]) == 4 * len(SEEDS)


def test_iqm_curve_is_rliables_iqm_per_point_with_an_interval_around_it() -> None:
    from rliable import metrics

    from llm_policy_gen.plotting.stats import iqm_curve

    x = np.random.default_rng(0).normal(size=(7, 5)).cumsum(axis=1)
    x[0, 0] = np.nan  # a run without a value there: no estimate at that point
    mid, low, high = iqm_curve(x, reps=50)
    assert np.isnan(mid[0]) and np.isnan(low[0])
    assert np.allclose(mid[1:], [metrics.aggregate_iqm(x[:, j]) for j in range(1, 5)])
    assert np.all(low[1:] <= mid[1:]) and np.all(mid[1:] <= high[1:])


def test_prior_scores_are_measured_once_and_kept(bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scores = bench["suite_scores"]
    got = scores.priors(tmp_path, [("cartpole", "CartPole-v1", 0)])
    kept = json.loads((tmp_path / "priors.json").read_text())
    assert kept["tasks"]["cartpole"]["table"] == "prior rule" and kept["heldout_episodes"] == 100
    assert got["cartpole"][0] > 100.0  # the prior rule balances the pole for a while; the default table does not
    monkeypatch.setattr(scores, "_prior_means", lambda *_a: pytest.fail("measured again"))
    assert scores.priors(tmp_path, [("cartpole", "CartPole-v1", 0)]) == got
    assert scores.prior_kind("Acrobot-v1") == "no prior: default action 1 everywhere"


def test_report_only_rewrites_the_page_and_refuses_a_folder_without_results(
        bench, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = bench["suite"]
    out = tmp_path / "suite"
    _write(out)
    before = (out / "results.json").read_text()
    assert suite.main(["--out", str(out), "--report", "a partial note"]) == 0
    assert "a partial note" in (out / "suite.md").read_text() and (out / "results.json").read_text() == before
    assert (out / "img" / "curves_cartpole.png").is_file()
    empty = tmp_path / "empty"
    assert suite.main(["--out", str(empty), "--report", "n"]) == 2
    assert capsys.readouterr().err.strip().endswith("no results.json there") and not empty.exists()


def test_a_curve_that_is_another_methods_is_drawn_dashed_over_it_and_says_so(
        bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """offline-neutral on a spec with no prior runs the very same runs as offline: its curve must not hide
    offline's (a solid line drawn over another of the same values), so it is dashed and its label names the twin."""
    import llm_policy_gen.plotting.figure as figure

    curves = bench["suite_curves"]
    runs = [curves.Run("t", m, s, 10.0 + s, steps=[100.0, 200.0], episodes=[1.0, 2.0], values=[v + s, v + 5 + s])
            for m, v in (("offline", 10.0), ("offline-neutral", 10.0), ("random", 3.0)) for s in SEEDS]
    kept = []
    monkeypatch.setattr(figure, "save_figure", lambda fig, path: kept.append(fig) or path)
    curves.task_figure(tmp_path / "c.png", "T", runs, goal=50.0, random_return=None)
    lines = {line.get_label(): line.get_linestyle() for line in kept[0].axes[0].get_lines()}
    assert lines["offline (IQM of 3)"] == "-" and lines["random (IQM of 3)"] == "-"
    assert lines["offline-neutral (IQM of 3), the same curve as offline"] == "--"


def test_two_suites_on_one_folder_keep_each_others_records(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    """Each suite invocation writes only its own records: one that started before another's runs finished (and so
    never read them) does not drop them when it writes (the loss of 2026-11-28: two suites on one ``--out``)."""
    suite = bench["suite"]

    def rec(task: str, backend: str, seed: int, heldout: float) -> dict:
        return {"task": task, "backend": backend, "seed": seed, "heldout": heldout}

    suite.write_results(tmp_path, [rec("pendulum", "q-learning", 0, -987.0), rec("pendulum", "random", 0, -1100.0)])
    suite.write_results(tmp_path, [rec("cartpole", "offline", 1, 480.0)])
    suite.write_results(tmp_path, [rec("pendulum", "random", 0, -1090.0)])  # a record replaced by its own key
    got = {suite.record_key(r): r["heldout"] for r in suite.read_results(tmp_path)}
    assert got == {("cartpole", "offline", 1): 480.0, ("pendulum", "q-learning", 0): -987.0,
                   ("pendulum", "random", 0): -1090.0}
    assert [suite.record_key(r) for r in suite.read_results(tmp_path)] == sorted(got)
