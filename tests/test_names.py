"""One word for one measure (issue 30 item 2): ``test_*`` for the test seeds, ``heldout_*`` for the held-out seeds,
inside the code; the files keep the contract's keys, and the old setting names still read everywhere a setting is
given (a TOML file, a run's config.json, the command line), through the one mapping of
``llm_policy_gen/schema/aliases.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.loggers.writers import scalars
from llm_policy_gen.modes import MODES
from llm_policy_gen.modes.base import RunServices, Step
from llm_policy_gen.modes.table import TableMode
from llm_policy_gen.run.checkpoint import load_checkpoint, save_checkpoint
from llm_policy_gen.schema.aliases import LAYOUT_BEFORE_CANDIDATES, events_in, summary_in
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llm_policy_gen"
QUICK = ["--backend", "offline", "--seed", "3", "--candidates", "2", "--heldout-episodes", "5", "--no-plots",
         "--no-progress", "--quiet"]


def _train(tmp_path: Path, *args: str) -> Path:
    assert main(["train", "--env", "CartPole-v1", *QUICK, "--logs-dir", str(tmp_path / "logs"), *args]) == 0
    (run,) = (tmp_path / "logs").glob("*/*")
    return run


def _config(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "config.json").read_text())["config"])


def _rename_back(run: Path) -> None:
    """Make ``run`` look as the code before the rename wrote it: the old setting names in config.json (also in
    ``explicit``) and the old history keys in the checkpoint."""
    record = json.loads((run / "config.json").read_text())
    old = {"test_start": "eval_start", "test_max": "eval_max", "test_rise_every": "eval_rise_every"}
    record["config"] = {old.get(k, k): v for k, v in record["config"].items()}
    record["config"]["explicit"] = [old.get(k, k) for k in record["config"]["explicit"]]
    (run / "config.json").write_text(json.dumps(record, indent=2))
    state = load_checkpoint(run / "checkpoint.npz")
    state["history"] = [{{"test_mean": "eval_mean", "test_episodes": "eval_episodes"}.get(k, k): v
                         for k, v in h.items()} for h in state["history"]]
    save_checkpoint(run / "checkpoint.npz", state)


def test_new_runs_record_the_new_setting_names_and_keep_the_contracts_file_keys(tmp_path: Path) -> None:
    run = _train(tmp_path, "--iterations", "2", "--test-start", "2", "--test-max", "4")
    cfg = _config(run)
    assert (cfg["test_start"], cfg["test_max"], cfg["test_rise_every"]) == (2, 4, 1)
    assert not {"eval_start", "eval_max", "eval_rise_every"} & set(cfg)
    events = read_jsonl(run / "events.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    # the outside contract's keys: the held-out mean is best_eval_mean in both files, the test mean eval_mean; layout 2
    # writes the code's words beside them (the same values)
    assert {"eval_mean", "eval_returns", "eval_episodes", "best_eval_mean", "best_test_mean"} <= set(events[-1])
    assert events[-1]["test_mean"] == events[-1]["eval_mean"]
    assert events[-1]["best_heldout_mean"] == events[-1]["best_eval_mean"]
    assert [e["eval_episodes"] for e in events] == [2, 3]
    assert {"best_eval_mean", "best_eval_std", "best_eval_episodes"} <= set(summary)
    assert summary["best_eval_mean"] == events[-1]["best_eval_mean"] == events[-1]["heldout_mean"]
    assert summary_in(summary)["best_heldout_mean"] == summary["best_eval_mean"]


def test_a_toml_file_with_the_old_names_still_configures_the_run(tmp_path: Path) -> None:
    conf = tmp_path / "old.toml"
    conf.write_text("[train]\neval_start = 2\neval_max = 2\neval-rise-every = 3\n")
    run = _train(tmp_path, "--iterations", "2", "--config", str(conf))
    cfg = _config(run)
    assert (cfg["test_start"], cfg["test_max"], cfg["test_rise_every"]) == (2, 2, 3)
    assert {"test_start", "test_max", "test_rise_every"} <= set(cfg["explicit"])
    assert [e["eval_episodes"] for e in read_jsonl(run / "events.jsonl")] == [2, 2]


def test_the_old_command_line_options_still_work_unlisted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _train(tmp_path, "--iterations", "2", "--eval-start", "1", "--eval-max", "1")
    assert (_config(run)["test_start"], _config(run)["test_max"]) == (1, 1)
    assert [e["eval_episodes"] for e in read_jsonl(run / "events.jsonl")] == [1, 1]
    capsys.readouterr()
    assert main(["train", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--test-start" in help_text and "--test-rise-every" in help_text and "--eval-start" not in help_text


def test_one_setting_under_both_names_is_refused_in_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "both.toml"
    conf.write_text("eval_start = 2\ntest_start = 3\n")
    code = main(["train", "--env", "CartPole-v1", *QUICK, "--logs-dir", str(tmp_path / "logs"), "--config", str(conf)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "eval_start is the old name of test_start" in err[0] and str(conf) in err[0]
    assert not (tmp_path / "logs").exists()


def test_a_run_directory_with_the_old_names_resumes_evaluates_and_reports(tmp_path: Path) -> None:
    run = _train(tmp_path, "--iterations", "2", "--test-start", "2", "--test-max", "3")
    _rename_back(run)
    assert "eval_start" in _config(run) and "test_start" not in _config(run)
    assert main(["train", "--resume", str(run), "--iterations", "4", "--quiet", "--no-progress"]) == 0
    events = read_jsonl(run / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3, 4]
    assert [e["eval_episodes"] for e in events] == [2, 3, 3, 3]  # the recorded eval_start/eval_max were kept
    summary = json.loads((run / "summary.json").read_text())
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", "evaluate", str(run), "--json"], capture_output=True,
                          text=True, check=True, cwd=ROOT)
    assert json.loads(proc.stdout)["mean"] == pytest.approx(summary["best_eval_mean"])
    out = tmp_path / "page.html"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert f"{summary['best_eval_mean']:,.2f}" in out.read_text()
    # its config.json, given as a config file, re-runs the experiment under today's names
    again = tmp_path / "again"
    assert main(["train", "--config", str(run / "config.json"), "--logs-dir", str(again), "--quiet",
                 "--no-progress", "--no-plots"]) == 0
    (rerun,) = again.glob("*/*")
    assert (_config(rerun)["test_start"], _config(rerun)["test_max"]) == (2, 3)


def test_an_events_file_from_before_candidates_reads_through_the_same_mapping() -> None:
    """Version 1 lines held the kept table's test mean in best_eval_mean and the held-out mean in heldout_mean."""
    old = {"iteration": 2, "best_eval_mean": 206.75, "heldout_mean": 200.3, "accepted": False, "eval_mean": 141.5,
           "eval_episodes": 4, "episodes_total": 19, "validation_errors": ["x"]}
    (line,), layout = events_in([old])
    assert layout == LAYOUT_BEFORE_CANDIDATES
    assert (line["best_test_mean"], line["best_heldout_mean"], line["test_mean"]) == (206.75, 200.3, 141.5)
    s = scalars(line)
    assert s["eval/best_test_mean"] == 206.75 and s["eval/heldout_mean"] == 200.3
    assert s["eval/chosen_test_mean"] == 141.5 and s["eval/test_episodes"] == 4
    now = {**old, "best_test_mean": 206.75, "best_eval_mean": 200.3}
    (line,), _ = events_in([now])
    assert (line["best_test_mean"], line["best_heldout_mean"]) == (206.75, 200.3)


def test_the_old_names_live_only_in_the_alias_mapping() -> None:
    """The done-when check of issue 30 item 2: ``grep -rln "best_eval_mean|eval_start|eval_max" llm_policy_gen/``."""
    found = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*")
                   if p.is_file() and p.suffix in (".py", ".j2", ".toml", ".md", ".js", ".json")
                   and any(w in p.read_text(encoding="utf-8") for w in ("best_eval_mean", "eval_start", "eval_max")))
    assert found == ["run/schema.py", "schema/aliases.py"]  # the mapping, and layout 2's writer of both spellings


class WatchedTableMode(TableMode):
    """Table mode that looks, right after ``run.judge``, at what the judging left behind."""

    name = "watched-table"
    seen: ClassVar[list[dict[str, Any]]] = []

    def iterate(self, run: RunServices, iteration: int) -> Step:
        before = run.counters.heldout_total  # type: ignore[attr-defined]  # the test's look behind the services
        step = super().iterate(run, iteration)
        policies = sorted(p.name for p in (run.dir.path / "policies").glob("iter_*.json"))  # type: ignore[attr-defined]
        self.seen.append({"iteration": iteration, "accepted": step.accepted, "policies": policies,
                          "heldout_measured": run.counters.heldout_total - before})  # type: ignore[attr-defined]
        return step


def test_judge_only_judges_and_the_run_keeps_the_verdict(tmp_path: Path) -> None:
    """``run.judge`` writes no file and measures no held-out seed; the run does both once the iteration returns:
    every iteration's policy file, and a new best's held-out episodes (5 each) in its events line."""
    MODES.register("watched-table", f"{__name__}:WatchedTableMode", description="test example")
    WatchedTableMode.seen.clear()
    try:
        run = _train(tmp_path, "--iterations", "4", "--mode", "watched-table")
    finally:
        MODES.unregister("watched-table")
    seen = WatchedTableMode.seen
    assert [s["iteration"] for s in seen] == [1, 2, 3, 4]
    assert all(s["heldout_measured"] == 0 for s in seen)
    assert [s["policies"] for s in seen] == [[f"iter_{i:04d}.json" for i in range(1, k)] for k in range(1, 5)]
    assert sorted(p.name for p in (run / "policies").glob("iter_*.json")) == [f"iter_{i:04d}.json"
                                                                               for i in range(1, 5)]
    events = read_jsonl(run / "events.jsonl")
    assert any(s["accepted"] for s in seen)  # an adoption happened, so the held-out step was exercised
    for s, e in zip(seen, events, strict=True):
        assert e["accepted"] == s["accepted"] and (e.get("heldout_episodes") == 5) == s["accepted"]


def test_a_comparison_recorded_under_the_old_names_is_the_same_sweep_and_a_change_is_named() -> None:
    """``compare`` re-run on its folder compares the recorded settings (compare.json, each run's config.json) with
    its own: an old name is today's setting, not a setting the other side lacks."""
    from llm_policy_gen.sweep.plan import differences, experiment

    old = {"env_id": "CartPole-v1", "eval_start": 2, "eval_max": 4, "explicit": ["eval_start", "eval_max"]}
    new = {"env_id": "CartPole-v1", "test_start": 2, "test_max": 4, "explicit": ["test_start", "test_max"]}
    assert experiment(old) == experiment(new) == {"env_id": "CartPole-v1", "test_start": 2, "test_max": 4}
    assert differences(experiment(old), experiment({**new, "test_max": 5})) == ["test_max 4 (this command: 5)"]
