"""``compare``: input checks, a small sweep and its files, resuming, failed runs, the process pool and Ray."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.compare import (
    CSV_COLUMNS,
    TIME_COLUMNS,
    backend_stats,
    parse_backends,
    parse_seeds,
    read_results,
    run_compare,
)
from llm_policy_gen.errors import UserError

SMALL = {"heldout_episodes": 10, "train_episodes": 2}


def numbers(path: Path) -> list[dict[str, str]]:
    """results.csv rows without the time columns."""
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def config_file(tmp_path: Path) -> Path:
    p = tmp_path / "small.toml"
    p.write_text("[train]\nheldout-episodes = 10\ntrain-episodes = 2\n")
    return p


@pytest.mark.parametrize(("text", "seeds"), [("0-4", [0, 1, 2, 3, 4]), ("3", [3]), ("0,2,7", [0, 2, 7]),
                                              ("0-2,9", [0, 1, 2, 9]), ("1-1", [1]), ("0-1,1", [0, 1])])
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["5-2", "a", "-1", "1-", "", "0-2;4", "1.5"])
def test_bad_seeds_are_user_errors(text: str) -> None:
    with pytest.raises(UserError, match="bad --seeds"):
        parse_seeds(text)


def test_parse_backends_checks_every_name() -> None:
    assert parse_backends("offline, q-learning,random,offline") == ["offline", "q-learning", "random"]
    with pytest.raises(UserError, match="unknown backend 'gpt5'"):
        parse_backends("offline,gpt5")
    with pytest.raises(UserError):
        parse_backends(" , ")


@pytest.mark.parametrize(("args", "message"), [
    (["--backends", "offline,nope", "--seeds", "0-1"], "unknown backend 'nope'"),
    (["--backends", "offline", "--seeds", "5-2"], "bad --seeds '5-2'"),
    (["--backends", "offline", "--seeds", "0", "--env", "NoSuchEnv-v9"], "unknown environment 'NoSuchEnv-v9'"),
    (["--backends", "offline", "--seeds", "0", "--workers", "0"], "bad --workers 0"),
    (["--backends", "offline", "--seeds", "0", "--iterations", "0"], "bad --iterations 0"),
])
def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                           message: str) -> None:
    argv = ["compare", "--out", str(tmp_path / "cmp"), *args]
    if "--env" not in args:
        argv += ["--env", "CartPole-v1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "cmp" / "runs").exists()


def test_sweep_writes_the_comparison_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    argv = ["compare", "--env", "FrozenLake-v1", "--backends", "offline,random", "--seeds", "0-1",
            "--iterations", "2", "--config", str(config_file(tmp_path)), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| offline | no | 2/2 |" in printed and f"comparison directory: {out}" in printed
    for name in ("results.csv", "results.md", "curves.png", "curves.json", "compare.json"):
        assert (out / name).is_file(), name
    rows = read_results(out / "results.csv")
    assert [(r["backend"], r["seed"], r["status"]) for r in rows] == [
        ("offline", 0, "ok"), ("offline", 1, "ok"), ("random", 0, "ok"), ("random", 1, "ok")]
    with open(out / "results.csv", newline="") as fh:
        assert tuple(next(csv.reader(fh))) == CSV_COLUMNS
    for r in rows:
        summary = json.loads((out / r["run_dir"] / "summary.json").read_text())
        assert r["best_eval_mean"] == pytest.approx(summary["best_eval_mean"])
        assert r["episodes_total"] == summary["episodes_total"] and r["iterations"] == 2
        assert summary["best_eval_episodes"] == 10  # --config reached the runs
    md = (out / "results.md").read_text()
    assert "final eval mean [95% CI]" in md and "| random | no | 2/2 |" in md and "--iterations 2" in md
    curves = json.loads((out / "curves.json").read_text())["runs"]
    assert len(curves) == 4 and all(len(c["x"]) == 2 for c in curves)
    first = numbers(out / "results.csv")
    stamp = (out / rows[0]["run_dir"] / "summary.json").stat().st_mtime_ns

    # A re-run skips every finished run.
    assert main(argv) == 0
    assert "4 of 4 runs finished earlier: skipped" in capsys.readouterr().err
    assert (out / rows[0]["run_dir"] / "summary.json").stat().st_mtime_ns == stamp
    assert numbers(out / "results.csv") == first

    # A run killed before its summary is run again, alone, into the same directory.
    (out / rows[3]["run_dir"] / "summary.json").unlink()
    assert main(argv) == 0
    assert "3 of 4 runs finished earlier: skipped" in capsys.readouterr().err
    assert numbers(out / "results.csv") == first
    assert sorted(p.name for p in (out / "runs" / "FrozenLake-v1").iterdir()) == [
        "offline_s0", "offline_s1", "random_s0", "random_s1"]


def test_a_failed_run_is_a_row_not_the_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    missing = tmp_path / "missing.jsonl"
    argv = ["compare", "--env", "FrozenLake-v1", "--backends", f"replay:{missing},random", "--seeds", "0",
            "--iterations", "1", "--config", str(config_file(tmp_path)), "--out", str(out), "--no-progress"]
    assert main(argv) == 1
    assert "1 of 2 runs failed" in capsys.readouterr().err
    rows = read_results(out / "results.csv")
    assert [r["status"] for r in rows] == ["failed", "ok"]
    assert "replay file" in rows[0]["error"] and "does not exist" in rows[0]["error"]
    assert "## Failed runs" in (out / "results.md").read_text()
    # Once the file exists, a re-run retries the failed run and keeps the finished one.
    missing.write_text(json.dumps({"response_text": '{"rationale": "r", "rows": [{"state": 0, "action": 1}]}'})
                       + "\n")
    assert main(argv) == 0
    assert [r["status"] for r in read_results(out / "results.csv")] == ["ok", "ok"]


def test_backend_stats_from_known_rows() -> None:
    def row(backend: str, seed: int, score: float, solved_at: int | None) -> dict[str, object]:
        return {"backend": backend, "seed": seed, "status": "ok", "is_llm": False, "best_eval_mean": score,
                "solved": solved_at is not None, "episodes_to_solve": solved_at, "llm_calls": 30,
                "input_tokens": 100, "output_tokens": 50, "cost_usd": 0.5, "wall_s": 2.0}

    rows = [row("a", 0, 0.0, None), row("a", 1, 10.0, 40), row("b", 0, 5.0, 10), row("b", 1, 5.0, 30),
            {"backend": "b", "seed": 2, "status": "failed", "error": "boom"}]
    a, b = backend_stats(rows)
    assert (a.score.estimate, a.score.low, a.score.high) == (5.0, 0.0, 10.0)
    assert a.median_episodes_to_solve is None and a.solve_rate == 0.5
    assert (b.ok, b.runs, b.median_episodes_to_solve, b.solve_rate) == (2, 3, 20.0, 1.0)
    assert (b.calls, b.tokens, b.cost_usd, b.wall_s) == (30.0, 150.0, 1.0, 2.0)
    assert np.isnan(backend_stats([{"backend": "c", "seed": 0, "status": "failed"}])[0].score.estimate)


@pytest.mark.slow
def test_process_pool_gives_the_same_numbers(tmp_path: Path) -> None:
    common = dict(env_id="CartPole-v1", backends=["offline", "q-learning"], seeds=[0, 1], settings=
                  {**SMALL, "iterations": 2}, progress=False)
    run_compare(out=tmp_path / "one", workers=1, **common)  # type: ignore[arg-type]
    run_compare(out=tmp_path / "two", workers=2, **common)  # type: ignore[arg-type]
    assert numbers(tmp_path / "one" / "results.csv") == numbers(tmp_path / "two" / "results.csv")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (pip install 'llm-policy-gen[ray]')")
def test_ray_executor_gives_the_same_numbers(tmp_path: Path) -> None:
    common = dict(env_id="CartPole-v1", backends=["offline", "random"], seeds=[0, 1], settings=
                  {**SMALL, "iterations": 2}, progress=False)
    run_compare(out=tmp_path / "local", executor="local", **common)  # type: ignore[arg-type]
    rows = run_compare(out=tmp_path / "ray", executor="ray", workers=2, **common)  # type: ignore[arg-type]
    assert all(r["status"] == "ok" for r in rows)
    assert numbers(tmp_path / "local" / "results.csv") == numbers(tmp_path / "ray" / "results.csv")
    assert json.loads((tmp_path / "ray" / "compare.json").read_text())["executor"] == "ray"
