"""bench/peers.py and the report of bench/suite.py: episode budget, time cap, peer columns with the ratio to offline,
worst seed and goal count. The logic needs no sbx; one end-to-end run does (skipped without the `peers` extra)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """(suite, peers), imported as the scripts import each other (bench/ first on the path)."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("suite"), importlib.import_module("peers")


def _suite_record(task: str, seed: int, heldout: float, within: float, backend: str = "offline") -> dict:
    return {"task": task, "env_id": "CartPole-v1", "backend": backend, "seed": seed, "budget": 100,
            "heldout": heldout, "heldout_within": within, "episodes": 110, "reached_at": 50 if heldout >= 475 else None,
            "wall_s": 1.0, "cpu_s": 1.0, "iterations": 3, "stop": "max_episodes"}


def _peer_record(task: str, algo: str, seed: int, heldout: float | None, budget: int = 100,
                 capped: bool = False) -> dict:
    rec = {"task": task, "env_id": "CartPole-v1", "algo": algo, "seed": seed, "budget": budget}
    if heldout is None:
        return {**rec, "error": "RuntimeError: boom"}
    return {**rec, "heldout": heldout, "episodes": budget, "timesteps": 2000, "capped": capped}


def test_budget_clock_stops_at_the_episode_budget(bench):
    _, peers = bench
    clock = peers.BudgetClock(budget=3, cap_s=600.0)
    finished = iter((0, 1, 0, 0, 1, 0, 1, 0))
    while clock.tick(next(finished), cpu_now=1.0):
        pass
    assert next(finished) == 0  # stopped at the step that finished the third episode
    assert (clock.episodes, clock.steps, clock.capped) == (3, 7, False)


def test_budget_clock_caps_on_cpu_time_and_says_so(bench):
    _, peers = bench
    clock = peers.BudgetClock(budget=100, cap_s=600.0, start_cpu=50.0)
    assert clock.tick(1, cpu_now=649.0)
    assert not clock.tick(1, cpu_now=651.0)
    assert clock.capped and clock.episodes == 2
    # the budget reached at the same step wins: not capped
    late = peers.BudgetClock(budget=1, cap_s=1.0)
    assert not late.tick(1, cpu_now=5.0) and not late.capped


def test_timestep_bound_and_algorithms(bench):
    _, peers = bench
    assert peers.timestep_bound(100, 500) == 50_000
    with pytest.raises(ValueError, match="got 0"):
        peers.timestep_bound(0, 500)
    assert peers.algos_for(True) == ("ppo", "dqn")
    assert peers.algos_for(False) == ("ppo", "sac")


def test_ratio_is_above_one_when_the_peer_is_better(bench):
    suite, _ = bench
    assert suite.ratio(250.0, 500.0) == 0.5
    assert suite.ratio(-100.0, -200.0) == 2.0  # less negative: better
    assert suite.ratio(-150.0, -120.0) == pytest.approx(0.8)
    assert suite.ratio(10.0, -5.0) is None and suite.ratio(None, 1.0) is None and suite.ratio(0.0, 3.0) is None


def test_seed_stats_worst_and_count(bench):
    suite, _ = bench
    cart = suite.BY_KEY["cartpole"]
    assert suite.seed_stats(cart, [500.0, 224.0, 480.0, None]) == (224.0, "2/4")
    cliff = suite.BY_KEY["cliffwalking"]  # an exact goal
    assert suite.seed_stats(cliff, [-13.0, -12.0, -15.0]) == (-15.0, "1/3")


def test_suite_md_has_worst_met_and_peer_columns(bench):
    suite, peers = bench
    records = [_suite_record("cartpole", 0, 500.0, 480.0), _suite_record("cartpole", 1, 300.0, 290.0),
               _suite_record("cartpole", 2, 490.0, 470.0), _suite_record("cartpole", 0, 150.0, 150.0, "random")]
    peer_records = [_peer_record("cartpole", "ppo", 0, 245.0), _peer_record("cartpole", "ppo", 1, 200.0, capped=True),
                    _peer_record("cartpole", "ppo", 2, None), _peer_record("cartpole", "dqn", 0, 9.0, budget=5),
                    *[_peer_record("taxi", "dqn", s, -200.0) for s in range(2)]]
    taxi = suite.BY_KEY["taxi"]
    for r in peer_records[-2:]:
        r["budget"] = taxi.budget
    cells = peers.cells(peer_records)
    # a run at another budget (a test's) is not a column; a failed seed is a missing value, not a failed cell
    assert [(c.task, c.column, c.values, c.capped) for c in cells] == [
        ("cartpole", "sbx PPO", (245.0, 200.0, None), 1), ("taxi", "sbx DQN", (-200.0, -200.0), 0)]
    page = suite.markdown(records, "a note", cells)
    lines = page.splitlines()
    header = next(line for line in lines if line.startswith("| task"))
    assert header.endswith("| sbx PPO | sbx DQN |") and "| worst | met | within budget (worst, met) |" in header
    n_cols = header.count("|")
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| task")]
    assert all(row.count("|") == n_cols for row in rows), rows
    offline = next(r for r in rows if "| offline |" in r)
    assert "**490.0** (500.0, 300.0, 490.0) | 300.0 | 2/3 | 470.0 (290.0, 1/3) |" in offline
    # the peer cell: median 222.5 of two seeds, ratio to offline's 490.0, one capped run of three
    assert "**222.5** (245.0, 200.0, -); worst 200.0, met 0/3; 0.45x offline; capped 1/3" in offline
    random_row = next(r for r in rows if "| random |" in r)
    assert random_row.endswith("|  |  |")  # peers only on the task's first row
    taxi_row = next(r for r in rows if r.startswith("| Taxi-v4"))
    assert "(suite not run)" in taxi_row and "no ratio to offline" in taxi_row


def test_a_task_that_differs_only_in_its_table_shows_the_other_tasks_runs(bench):
    """A peer never sees the spec's table or rules: LunarLander-v3.products is LunarLander-v3's runs, marked so; the
    same environment at another budget (Hopper-v5.rich) is trained on its own."""
    suite, peers = bench
    sources = peers.run_tasks()
    assert sources["lunarlander-products"] == "lunarlander"
    assert sources["lunarlander"] == "lunarlander"
    assert sources["hopper-rich"] == "hopper-rich"
    budget = suite.BY_KEY["lunarlander"].budget
    records = [_peer_record("lunarlander", "ppo", s, v, budget=budget) for s, v in enumerate((-120.0, 40.0, 10.0))]
    by_task = {c.task: c for c in peers.cells(records)}
    assert by_task["lunarlander"].values == by_task["lunarlander-products"].values == (-120.0, 40.0, 10.0)
    assert by_task["lunarlander"].same_as is None
    assert by_task["lunarlander-products"].same_as == "LunarLander-v3"
    rows = [_suite_record("lunarlander-products", 0, 20.0, 20.0)]
    page = suite.markdown(rows, "n", [by_task["lunarlander-products"]])
    assert "**10.0** (-120.0, 40.0, 10.0); worst -120.0, met 0/3; 0.50x offline; the runs of LunarLander-v3" in page
    line = importlib.import_module("suite_lines").readme_lines(rows, [by_task["lunarlander-products"]])
    assert "; sbx PPO 10.0 (0.50x offline), LunarLander-v3's runs." in line


def test_write_report_keeps_the_other_scripts_part(bench, tmp_path):
    suite, peers = bench
    (tmp_path / "results.json").write_text(json.dumps([_suite_record("cartpole", 0, 500.0, 480.0)]))
    suite.write_report(tmp_path, note="suite note")
    peers_cells = peers.cells([_peer_record("cartpole", "ppo", 0, 125.0)])
    suite.write_report(tmp_path, peers=peers_cells)  # bench/peers.py: the suite's note stays
    page = (tmp_path / "suite.md").read_text()
    assert "suite note" in page and "0.25x offline" in page
    suite.write_report(tmp_path, note="a later suite note")  # the suite again: the peer column stays
    page = (tmp_path / "suite.md").read_text()
    assert "a later suite note" in page and "0.25x offline" in page and "\nsuite note\n" not in page


@pytest.mark.slow
def test_one_peer_run_end_to_end(bench, monkeypatch):
    pytest.importorskip("sbx")
    _, peers = bench
    for name, value in peers.ONE_THREAD.items():  # run_one sets them for its process: undone after the test
        monkeypatch.setenv(name, value)
    rec = peers.run_one("cartpole", "ppo", 0, cap_s=600.0, budget=3, heldout_episodes=4)
    assert "error" not in rec, rec
    assert rec["episodes"] == 3 and not rec["capped"] and rec["heldout_episodes"] == 4
    assert 8.0 <= rec["heldout"] <= 500.0
    capped = peers.run_one("cartpole", "ppo", 0, cap_s=0.0, budget=1000, heldout_episodes=2)
    assert capped["capped"] and capped["episodes"] < 1000


def test_the_readme_has_one_line_per_task_with_its_verdict(bench, tmp_path):
    suite, peers = bench
    records = [_suite_record("cartpole", s, 500.0, w) for s, w in enumerate([480.0, 490.0, 476.0, 224.0, 500.0,
                                                                            477.0, 499.0, 481.0, 475.0, 300.0])]
    records += [{**_suite_record("taxi", s, 7.0, 7.0), "env_id": "Taxi-v4"} for s in range(10)]
    (tmp_path / "results.json").write_text(json.dumps(records))
    suite.write_report(tmp_path, note="n", peers=peers.cells([_peer_record("cartpole", "ppo", 0, 250.0)]))
    lines = (tmp_path / "readme.md").read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("- **CartPole-v1**") and lines[1].startswith("- **Taxi-v4**")
    # 8 of 10 seeds meet 475 within the budget and the median (478.5) does: met; the peer's ratio is to offline's
    # final median (500.0)
    assert "offline 478.5 (seeds 0-9), 8/10 seeds meet it, worst 224.0: **met**; sbx PPO 250.0 (0.50x offline)." \
        in lines[0]
    assert lines[1].endswith("offline 7.00 (seeds 0-9), 0/10 seeds meet it, worst 7.00: not met.")


def test_merge_moves_a_parts_finished_runs_and_records_into_the_suite(bench, tmp_path):
    suite, _ = bench
    out, part = tmp_path / "suite", tmp_path / "part"
    for folder, seeds in ((out, (0, 1)), (part, (1, 2))):
        records = []
        for s in seeds:
            run = folder / "runs" / "CartPole-v1" / f"cartpole_b100_offline_s{s}"
            run.mkdir(parents=True)
            (run / "summary.json").write_text("{}")
            records.append({**_suite_record("cartpole", s, 500.0, 480.0 + s + (10 if folder == part else 0)),
                            "run_dir": str(run)})
        (folder / "results.json").write_text(json.dumps(records + [{"task": "cartpole", "env_id": "CartPole-v1",
                                                                      "backend": "offline", "seed": 3,
                                                                      "error": "boom", "budget": 100}]))
    assert suite.main(["--out", str(out), "--merge", str(part)]) == 0
    merged = {r["seed"]: r for r in json.loads((out / "results.json").read_text())}
    assert sorted(merged) == [0, 1, 2, 3]  # out's failed seed 3 stays; the part's is not carried over
    # seed 1's run folder is in both: out's stays with its record; seed 2 moves over with the part's record
    assert merged[1]["heldout_within"] == 481.0 and merged[2]["heldout_within"] == 492.0
    for s in (1, 2):
        assert Path(merged[s]["run_dir"]) == out / "runs" / "CartPole-v1" / f"cartpole_b100_offline_s{s}"
        assert Path(merged[s]["run_dir"], "summary.json").is_file()
    assert not (part / "runs" / "CartPole-v1" / "cartpole_b100_offline_s2").exists()
    assert "- **CartPole-v1**" in (out / "readme.md").read_text()
    assert suite.main(["--out", str(out), "--merge", str(tmp_path / "nothing")]) == 2
