"""The priors apart (issue 32 item 4): ``train --prior neutral`` starts the search from no prior rule (every state at
the spec's default action), and bench/goal_runs.py's ``offline-neutral`` backend runs ``offline`` so (the goal
suite's ``offline-neutral`` is ``offline[prior=neutral]``); on a spec without
a prior it is the offline run itself (the same run id, never run twice)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from llm_policy_gen.cli import main

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def suite(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")  # run_one sets it for its process: undone after the test
    return importlib.import_module("goal_runs")


@pytest.fixture
def suite_goals(suite: ModuleType) -> ModuleType:
    """The goal table (bench/goal_runs.py, from goals.toml), on the path the suite fixture set."""
    return suite


def _recorded(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def test_train_prior_neutral_drops_the_prior_rule_and_records_it(tmp_path: Path) -> None:
    runs = {}
    for prior in ("spec", "neutral"):
        assert main(["train", "--env", "CartPole-v1", "--backend", "offline", "--prior", prior, "--max-episodes", "6",
                     "--heldout-episodes", "3", "--logs-dir", str(tmp_path), "--run-id", prior, "--no-plots",
                     "--no-progress", "--quiet"]) == 0
        runs[prior] = _recorded(tmp_path / "CartPole-v1" / prior)
    assert runs["spec"]["config"]["prior"] == "spec" and runs["spec"]["env_spec"]["prior"] is not None
    assert runs["neutral"]["config"]["prior"] == "neutral" and runs["neutral"]["env_spec"]["prior"] is None
    # the first candidate of the spec's run is its prior rule; the neutral run has no rule to start from
    first = [json.loads((tmp_path / "CartPole-v1" / p / "transcripts.jsonl").read_text().splitlines()[0])
             for p in ("spec", "neutral")]
    assert "prior rule" in json.dumps(first[0]) and "prior rule" not in json.dumps(first[1])


def test_train_prior_start_starts_the_kept_table_at_the_prior_rule(tmp_path: Path) -> None:
    """``--prior start``: the table the first adoption replaced is the prior rule's table, measured on the run's
    held-out seeds; with ``--prior spec`` it is the default action everywhere."""
    from llm_policy_gen.collect import Collector
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.sweep.random_baseline import heldout_seeds

    spec = get_spec("CartPole-v1")
    prior_table = spec.prior_table()
    assert prior_table is not None
    with Collector(spec, workers=1) as c:
        expect = {"start": c.evaluate(prior_table, heldout_seeds(0, 3)).returns,
                  "spec": c.evaluate(spec.default_table(), heldout_seeds(0, 3)).returns}
    assert list(expect["start"]) != list(expect["spec"])
    for prior in ("spec", "start"):
        assert main(["train", "--env", "CartPole-v1", "--backend", "offline", "--prior", prior, "--max-episodes", "6",
                     "--heldout-episodes", "3", "--logs-dir", str(tmp_path), "--run-id", prior, "--no-plots",
                     "--no-progress", "--quiet"]) == 0
        run = tmp_path / "CartPole-v1" / prior
        first = json.loads((run / "events.jsonl").read_text().splitlines()[0])
        assert first["accepted"] and first["heldout_returns_before"] == [float(x) for x in expect[prior]]
        assert _recorded(run)["config"]["prior"] == prior and _recorded(run)["env_spec"]["prior"] is not None


def test_a_bad_prior_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--env", "CartPole-v1", "--prior", "none", "--logs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prior" in err and "'spec', 'neutral', 'start'" in err
    assert not any(tmp_path.iterdir())


def test_offline_neutral_is_its_own_run_only_where_the_spec_has_a_prior(suite: ModuleType,
                                                                       suite_goals: ModuleType) -> None:
    cart, acro = suite_goals.BY_KEY["cartpole"], suite_goals.BY_KEY["acrobot"]
    assert suite.run_id(cart, "offline-neutral", 3) != suite.run_id(cart, "offline", 3)
    assert "offline-neutral_s3" in suite.run_id(cart, "offline-neutral", 3)
    assert suite.run_id(acro, "offline-neutral", 3) == suite.run_id(acro, "offline", 3)  # no prior: same run
    assert suite.backend_settings(cart, "offline-neutral") == ("offline", (("prior", "neutral"),))
    assert suite.backend_settings(acro, "offline-neutral") == ("offline", ())
    assert suite.backend_settings(cart, "offline-from-prior") == ("offline", (("prior", "start"),))
    assert suite.run_id(acro, "offline-from-prior", 3) == suite.run_id(acro, "offline", 3)


@pytest.mark.slow
def test_the_suite_runs_offline_neutral_on_a_tiny_budget(suite: ModuleType, suite_goals: ModuleType,
                                                          tmp_path: Path) -> None:
    goal = suite_goals.Goal("tiny", "CartPole-v1", 4, 475, "", "")
    rec = suite.run_one(goal, "offline-neutral", 0, tmp_path)
    assert "error" not in rec, rec
    assert rec["backend"] == "offline-neutral" and rec["episodes"] >= 4 and rec["heldout"] is not None
    run_dir = Path(rec["run_dir"])
    assert run_dir.name == "tiny_b4_offline-neutral_s0"
    assert _recorded(run_dir)["config"]["prior"] == "neutral" and _recorded(run_dir)["env_spec"]["prior"] is None
    # the record keeps the curve (every iteration's kept-table held-out mean), ending at the final held-out mean
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    assert rec["curve"] and len(rec["curve"]) == sum(e.get("best_eval_mean") is not None for e in events)
    assert rec["curve"][-1] == [float(events[-1]["env_steps_total"]), float(rec["episodes"]), rec["heldout"]]
    again = suite.run_one(goal, "offline-neutral", 0, tmp_path)  # finished: reused, not run again
    assert again["reused"] and again["heldout"] == rec["heldout"] and again["curve"] == rec["curve"]
