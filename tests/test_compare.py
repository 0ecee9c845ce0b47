"""``compare``: input checks before the first run, a small sweep and its files, re-runs (finished runs skipped,
interrupted ones resumed, other settings refused), failed runs, the process pool and Ray, and the sweep's shared
provider limits and budget against a loopback OpenAI server."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import openai_server
from fakes.tables import FillThenGo

from llm_policy_gen.cli import main
from llm_policy_gen.commands.compare import CompareConfig, run_compare
from llm_policy_gen.errors import UserError
from llm_policy_gen.run import Run
from llm_policy_gen.storage.locks import LOCK_FILES
from llm_policy_gen.storage.runlog import read_jsonl
from llm_policy_gen.sweep.plan import parse_backends, parse_seeds
from llm_policy_gen.sweep.results import CSV_COLUMNS, TIME_COLUMNS, ResultRow, backend_stats, read_results

fake_openai = openai_server.fake_openai
SMALL = {"heldout_episodes": 10, "train_episodes": 2}
MODEL = "gpt-4.1-mini"


def numbers(path: Path) -> list[dict[str, str]]:
    """results.csv rows without the time columns."""
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def config_file(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "small.toml"
    p.write_text("[train]\nheldout-episodes = 10\ntrain-episodes = 2\n" + extra)
    return p


def frozen_lake(tmp_path: Path, out: Path, *extra: str, iterations: int = 2) -> list[str]:
    return ["compare", "--env", "FrozenLake-v1", "--backends", "offline,random", "--seeds", "0-1",
            "--iterations", str(iterations), "--config", str(config_file(tmp_path)), "--out", str(out),
            "--no-progress", *extra]


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
    (["--backends", "offline", "--seeds", "0", "--iterations", "-1"], "bad --iterations -1"),
    (["--backends", "offline", "--seeds", "0", "--max-concurrent-calls", "0"], "bad --max-concurrent-calls 0"),
    (["--backends", "offline", "--seeds", "0", "--rpm", "0"], "bad --rpm 0"),
    (["--backends", "offline", "--seeds", "0", "--budget-usd", "-1"], "bad --budget-usd -1"),
    (["--backends", "offline", "--seeds", "0-1,4294967296"], "bad seed = 4294967296"),
    # A backend without its key fails before the offline runs, not after them.
    (["--backends", "offline,anthropic", "--seeds", "0-2"], "ANTHROPIC_API_KEY"),
    (["--backends", "offline,openai", "--seeds", "0-2"], "OPENAI_API_KEY"),
    (["--backends", "offline,kept-table-q@direct", "--seeds", "0"], "--mode direct needs a backend"),
])
def test_bad_input_exits_2_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          message: str) -> None:
    argv = ["compare", "--out", str(tmp_path / "cmp"), *args]
    if "--env" not in args:
        argv += ["--env", "CartPole-v1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "cmp").exists()
    assert not list(tmp_path.rglob("events.jsonl"))  # refused before any run: no iteration of any run was written


def test_a_missing_replay_file_or_an_unpriced_budget_is_refused_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jsonl"
    argv = ["compare", "--env", "FrozenLake-v1", "--seeds", "0", "--out", str(tmp_path / "cmp")]
    assert main([*argv, "--backends", f"random,replay:{missing}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-nobody")
    assert main([*argv, "--backends", "offline,openai:no-such-model", "--budget-usd", "1"]) == 2
    err = capsys.readouterr().err
    assert "--budget-usd needs a price for openai:no-such-model" in err
    assert "sk-test-key-for-nobody" not in err
    assert not (tmp_path / "cmp").exists()


def test_a_ray_address_where_nothing_answers_is_refused_before_any_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    assert main(["compare", "--env", "FrozenLake-v1", "--backends", "random", "--seeds", "0", "--executor", "ray",
                 "--out", str(tmp_path / "cmp")]) == 2
    ray = sys.modules.get("ray")  # refused before Ray was started (ray.init would spend ~20 s retrying the address)
    assert ray is None or not ray.is_initialized()
    err = capsys.readouterr().err
    assert f"RAY_ADDRESS '127.0.0.1:{port}': nothing answers" in err and err.count("\n") == 1
    assert not (tmp_path / "cmp").exists()


def test_sweep_writes_the_comparison_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    argv = frozen_lake(tmp_path, out)
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| offline | no | 2/2 |" in printed and f"comparison directory: {out}" in printed
    for name in ("results.csv", "results.md", "curves.png", "curves.json", "compare.json", "sweep.jsonl"):
        assert (out / name).is_file(), name
    rows = read_results(out / "results.csv")
    assert [(r.backend, r.seed, r.status) for r in rows] == [
        ("offline", 0, "ok"), ("offline", 1, "ok"), ("random", 0, "ok"), ("random", 1, "ok")]
    with open(out / "results.csv", newline="") as fh:
        assert tuple(next(csv.reader(fh))) == CSV_COLUMNS
    for r in rows:
        summary = json.loads((out / str(r.run_dir) / "summary.json").read_text())
        assert r.best_heldout_mean == pytest.approx(summary["best_eval_mean"])
        assert r.episodes_total == summary["episodes_total"] and r.iterations == 2
        assert summary["best_eval_episodes"] == 10  # --config reached the runs
    md = (out / "results.md").read_text()
    assert "IQM held-out return [95% CI]" in md and "| random | no | 2/2 |" in md and "--iterations 2" in md
    assert '`heldout_episodes` = 10' in md and "at most 8 calls in flight per provider" in md
    curves = json.loads((out / "curves.json").read_text())["runs"]
    assert len(curves) == 4 and all(len(c["x"]) == 2 for c in curves)
    first = numbers(out / "results.csv")
    stamp = (out / str(rows[0].run_dir) / "summary.json").stat().st_mtime_ns

    # A re-run skips every finished run; how it runs (workers, limits) may change.
    assert main([*argv, "--max-concurrent-calls", "2"]) == 0
    assert "4 of 4 runs finished earlier: skipped" in capsys.readouterr().err
    assert (out / str(rows[0].run_dir) / "summary.json").stat().st_mtime_ns == stamp
    assert numbers(out / "results.csv") == first

    # A run killed before its summary was written resumes from its checkpoint, in the same directory.
    (out / str(rows[3].run_dir) / "summary.json").unlink()
    assert main(argv) == 0
    assert "3 of 4 runs finished earlier: skipped; 1 started earlier: resumed" in capsys.readouterr().err
    assert numbers(out / "results.csv") == first
    assert sorted(p.name for p in (out / "runs" / "FrozenLake-v1").iterdir()) == [
        "offline_s0", "offline_s1", "random_s0", "random_s1"]


def interrupt_after_checkpoint(monkeypatch: pytest.MonkeyPatch, run_id: str, nth: int) -> None:
    """Ctrl-C in the run ``run_id`` right after its ``nth`` checkpoint (1: the start, 2: iteration 1, ...)."""
    real = Run.checkpoint
    seen = {"n": 0}

    def checkpoint(self: Run, *, now: bool = False) -> None:
        real(self, now=now)
        if self.dir.path.name == run_id:
            seen["n"] += 1
            if seen["n"] == nth:
                raise KeyboardInterrupt

    monkeypatch.setattr(Run, "checkpoint", checkpoint)


def test_an_interrupted_run_resumes_and_is_never_a_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    clean = tmp_path / "clean"
    assert main(frozen_lake(tmp_path, clean, iterations=4)) == 0
    out = tmp_path / "cmp"
    with monkeypatch.context() as m:
        interrupt_after_checkpoint(m, "random_s0", 3)  # after iteration 2 of 4
        assert main(frozen_lake(tmp_path, out, iterations=4)) == 130
    capsys.readouterr()
    rows = read_results(out / "results.csv")
    assert [(r.backend, r.seed, r.status) for r in rows] == [
        ("offline", 0, "ok"), ("offline", 1, "ok"), ("random", 0, "interrupted"), ("random", 1, "interrupted")]
    assert all(r.best_heldout_mean is None and r.iterations is None for r in rows if not r.ok)
    run = out / "runs" / "FrozenLake-v1" / "random_s0"
    assert json.loads((run / "summary.json").read_text())["stop_reason"] == "interrupted"
    assert "| random | no | 0/2 |" in (out / "results.md").read_text()
    kept = (run / "policies" / "iter_0002.json").stat().st_mtime_ns

    assert main(frozen_lake(tmp_path, out, iterations=4)) == 0
    assert "2 of 4 runs finished earlier: skipped; 1 started earlier: resumed" in capsys.readouterr().err
    assert (run / "policies" / "iter_0002.json").stat().st_mtime_ns == kept  # resumed, not run again
    assert "resuming" in (run / "compare.log").read_text() and "after iteration 2" in (run / "compare.log").read_text()
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == [1, 2, 3, 4]
    assert numbers(out / "results.csv") == numbers(clean / "results.csv")
    assert all(r.stop_reason == "iterations done" for r in read_results(out / "results.csv"))


def test_other_settings_under_the_same_out_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert main(frozen_lake(tmp_path, out)) == 0
    capsys.readouterr()
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}

    assert main(frozen_lake(tmp_path, out, iterations=3)) == 2
    err = capsys.readouterr().err
    assert "other settings: iterations 2 (this command: 3)" in err and err.count("\n") == 1
    argv = frozen_lake(tmp_path, out)
    argv[argv.index("FrozenLake-v1")] = "CliffWalking-v1"
    assert main(argv) == 2
    assert 'env_id "FrozenLake-v1" (this command: "CliffWalking-v1")' in capsys.readouterr().err
    assert main([*frozen_lake(tmp_path, out), "--budget-usd", "1"]) == 2
    assert "budget_usd null (this command: 1.0)" in capsys.readouterr().err
    # Without the sweep's record, each run's config.json still tells.
    (out / "compare.json").unlink()
    argv = frozen_lake(tmp_path, out)
    config_file(tmp_path, "gamma = 0.9\n")  # the evidence's discount under its old name: one line still
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the run runs/FrozenLake-v1/offline_s0 with other settings: evidence_gamma 0.98 (this command: 0.9)" in \
        err and err.count("\n") == 1, err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == \
        {k: v for k, v in files.items() if k != "compare.json"}


def test_a_failed_run_is_a_row_not_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import llm_policy_gen.run as engine

    real = engine.train

    def train(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        if cfg.backend == "random":
            raise RuntimeError("the backend broke")
        return real(cfg, *args, **kwargs)

    out = tmp_path / "cmp"
    argv = ["compare", "--env", "FrozenLake-v1", "--backends", "random,offline", "--seeds", "0",
            "--iterations", "1", "--config", str(config_file(tmp_path)), "--out", str(out), "--no-progress"]
    with monkeypatch.context() as m:
        m.setattr(engine, "train", train)
        assert main(argv) == 1
    assert "1 of 2 runs failed" in capsys.readouterr().err
    rows = read_results(out / "results.csv")
    assert [r.status for r in rows] == ["failed", "ok"]
    assert rows[0].error == "RuntimeError: the backend broke" and rows[0].best_heldout_mean is None
    assert "## Failed runs" in (out / "results.md").read_text()
    # A re-run runs the failed run and keeps the finished one.
    assert main(argv) == 0
    assert [r.status for r in read_results(out / "results.csv")] == ["ok", "ok"]


def test_a_spec_variant_is_compared_where_its_runs_go(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--env FrozenLake-v1.8x8`` (a spec variant): its runs go under the gymnasium id's folder, as ``train`` puts
    them, and are results, not failures (they were reported failed when the sweep looked under the variant's id)."""
    out = tmp_path / "cmp"
    argv = ["compare", "--env", "FrozenLake-v1.8x8", "--backends", "offline", "--seeds", "0", "--iterations", "1",
            "--config", str(config_file(tmp_path)), "--out", str(out), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    rows = read_results(out / "results.csv")
    assert [r.status for r in rows] == ["ok"] and rows[0].run_dir == "runs/FrozenLake-v1/offline_s0"
    assert json.loads((out / rows[0].run_dir / "config.json").read_text())["config"]["env_id"] == "FrozenLake-v1.8x8"
    summary = (out / rows[0].run_dir / "summary.json").read_bytes()
    assert main(argv) == 0  # a second invocation finds the finished run and keeps it as it is
    assert (out / rows[0].run_dir / "summary.json").read_bytes() == summary
    assert [r.status for r in read_results(out / "results.csv")] == ["ok"]


def test_backend_stats_from_known_rows() -> None:
    def row(backend: str, seed: int, score: float, solved_at: int | None) -> ResultRow:
        return ResultRow(backend=backend, seed=seed, status="ok", is_llm=False, best_heldout_mean=score,
                         solved=solved_at is not None, episodes_to_solve=solved_at, llm_calls=30,
                         input_tokens=100, output_tokens=50, cost_usd=0.5, wall_s=2.0)

    rows = [row("a", 0, 0.0, None), row("a", 1, 10.0, 40), row("b", 0, 5.0, 10), row("b", 1, 5.0, 30),
            ResultRow(backend="b", seed=2, status="failed", error="boom")]
    a, b = backend_stats(rows)
    assert (a.returns.estimate, a.returns.low, a.returns.high) == (5.0, 0.0, 10.0) and a.score is None
    assert a.median_episodes_to_solve is None and a.solve_rate == 0.5
    assert (b.ok, b.runs, b.median_episodes_to_solve, b.solve_rate) == (2, 3, 20.0, 1.0)
    assert (b.calls, b.tokens, b.cost_usd, b.wall_s) == (30.0, 150.0, 1.0, 2.0)
    assert np.isnan(backend_stats([ResultRow(backend="c", seed=0, status="failed")])[0].returns.estimate)


@pytest.mark.slow
def test_process_pool_gives_the_same_numbers(tmp_path: Path) -> None:
    common: dict[str, Any] = dict(env_id="CartPole-v1", backends=["offline", "q-learning"], seeds=[0, 1],
                                  settings={**SMALL, "iterations": 2}, progress=False)
    run_compare(CompareConfig(out=tmp_path / "one", workers=1, **common))
    run_compare(CompareConfig(out=tmp_path / "two", workers=2, **common))
    assert numbers(tmp_path / "one" / "results.csv") == numbers(tmp_path / "two" / "results.csv")


@pytest.mark.xdist_group("ray")  # with tests/test_cluster.py: one Ray at a time under xdist
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (pip install 'llm-policy-gen[ray]')")
def test_ray_executor_gives_the_same_numbers(tmp_path: Path) -> None:
    common: dict[str, Any] = dict(env_id="CartPole-v1", backends=["offline", "random"], seeds=[0, 1],
                                  settings={**SMALL, "iterations": 2}, progress=False)
    run_compare(CompareConfig(out=tmp_path / "local", executor="local", **common))
    rows = run_compare(CompareConfig(out=tmp_path / "ray", executor="ray", workers=2, **common))
    assert all(r.ok for r in rows)
    assert numbers(tmp_path / "local" / "results.csv") == numbers(tmp_path / "ray" / "results.csv")
    assert json.loads((tmp_path / "ray" / "compare.json").read_text())["executor"] == "ray"
    # The tasks ran the package Ray shipped (runtime_env working_dir), and the driver wrote their files.
    started = [e for e in read_jsonl(tmp_path / "ray" / "sweep.jsonl") if e["event"] == "started"]
    assert len(started) == 4 and all("runtime_resources" in e["package"] for e in started)
    for r in rows:
        local = tmp_path / "local" / str(r.run_dir)
        assert sorted(p.name for p in (tmp_path / "ray" / str(r.run_dir)).iterdir()) == \
            sorted(p.name for p in local.iterdir() if p.name not in LOCK_FILES)  # the local writer's lock file


# ---------------------------------------------------------------------------------------------------- shared limits
def llm_sweep(tmp_path: Path, out: Path, *extra: str, seeds: str = "0-3", iterations: int = 1,
              settings: str = "") -> list[str]:
    cfg = config_file(tmp_path, "candidates = 4\ncache = false\nconfirm-episodes = 0\n" + settings)
    return ["compare", "--env", "CartPole-v1", "--backends", f"openai:{MODEL}", "--seeds", seeds,
            "--iterations", str(iterations), "--config", str(cfg), "--out", str(out), "--no-progress", *extra]


@pytest.mark.slow
def test_max_concurrent_calls_holds_across_parallel_runs(fake_openai: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    responder = FillThenGo(3)
    fake_openai.responder = responder
    out = tmp_path / "cmp"
    # The loopback server counts as a server on this machine: each run sends 2 of its 4 candidates at once, so two
    # runs together want 4 calls in flight and only the shared limit keeps them at 3.
    assert main(llm_sweep(tmp_path, out, "--workers", "4", "--max-concurrent-calls", "3",
                          settings="local-concurrency = 2\n")) == 0, capsys.readouterr().err
    assert responder.total == 16  # 4 runs x 4 candidates, none cached
    assert responder.peak == 3
    limits = json.loads((out / "compare.json").read_text())["limits"]
    assert limits["max_concurrent_calls"] == 3 and max(limits["peak_calls_in_flight"].values()) == 3


@pytest.mark.slow
def test_the_budget_stops_the_sweeps_spending_at_the_ceiling(fake_openai: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[openai]\n"{MODEL}" = {{ input = 100.0, output = 100.0 }}\n')
    monkeypatch.setenv("LLM_POLICY_GEN_PRICES", str(prices))
    fake_openai.responder = FillThenGo(1)  # a limit of 1 is always full: every request goes at once
    out = tmp_path / "cmp"
    ceiling = 3.0
    assert main(llm_sweep(tmp_path, out, "--workers", "2", "--budget-usd", str(ceiling), seeds="0-1",
                          iterations=4)) == 0, capsys.readouterr().err
    rows = read_results(out / "results.csv")
    spent = sum(r.cost_usd or 0.0 for r in rows)
    calls = [t for r in rows if (out / str(r.run_dir) / "transcripts.jsonl").is_file()
             for t in read_jsonl(out / str(r.run_dir) / "transcripts.jsonl")]
    assert sum(t["cost_usd"] for t in calls) == pytest.approx(spent, abs=1e-4)
    assert 0.7 * ceiling < spent <= ceiling  # stopped at the ceiling: short of it by less than the calls in flight
    assert len(calls) < 2 * 4 * 4  # calls were refused
    assert all(r.ok and r.stop_reason == "budget reached" for r in rows)
    md = (out / "results.md").read_text()
    assert f"Budget: USD {ceiling:.4f} for the whole sweep" in md and "2 runs ended when the next call" in md
    assert json.loads((out / "compare.json").read_text())["limits"]["calls_refused_by_budget"] >= 2
    # A re-run with the same budget resumes nothing and spends nothing more: the runs are finished.
    before = fake_openai.requests[:]
    assert main(llm_sweep(tmp_path, out, "--workers", "2", "--budget-usd", str(ceiling), seeds="0-1",
                          iterations=4)) == 0
    assert len(fake_openai.requests) == len(before)
