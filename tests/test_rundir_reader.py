"""The one reader of a run directory: ``RunDir.read()`` gives the records in the code's words whatever the layout,
``RunDir.state()`` is the one rule of finished, and every file of a new run carries ``schema_version``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.run.files import SCHEMA_VERSION, RunDir, RunState

FIXTURES = Path(__file__).parent / "data" / "rundirs_v1" / "logs"


def test_every_file_of_a_new_run_carries_the_layout_and_both_spellings(tmp_path: Path) -> None:
    assert main(["train", "--env", "FrozenLake-v1", "--iterations", "2", "--logs-dir", str(tmp_path), "--run-id", "r",
                 "--no-plots", "--no-progress", "--heldout-episodes", "10"]) == 0
    rd = RunDir(tmp_path / "FrozenLake-v1" / "r")
    config = json.loads(rd.config.read_text())
    summary = json.loads(rd.summary.read_text())
    lines = [json.loads(line) for line in rd.events.read_text().splitlines()]
    assert config["schema_version"] == summary["schema_version"] == SCHEMA_VERSION == 2
    assert lines and all(e["schema_version"] == 2 for e in lines)
    calls = [json.loads(line) for line in rd.transcripts.read_text().splitlines()]
    assert calls and all(c["schema_version"] == 2 for c in calls)  # one line per call, each stamped
    # the code's words, and layout 1's keys beside them for this version (deprecated)
    assert summary["best_heldout_mean"] == summary["best_eval_mean"]
    for e in lines:
        assert e["test_mean"] == e["eval_mean"] and e["best_heldout_mean"] == e["best_eval_mean"]
    view = rd.read()
    assert view.state is RunState.FINISHED and view.summary["best_heldout_mean"] == summary["best_eval_mean"]
    assert all("eval_mean" not in e and "best_eval_mean" not in e for e in view.events)  # one word each


@pytest.mark.parametrize(("name", "state"), [("CartPole-v1/table", RunState.FINISHED),
                                             ("CartPole-v1/interrupted", RunState.INTERRUPTED),
                                             ("FrozenLake-v1/qlearning", RunState.FINISHED)])
def test_a_layout_1_run_reads_in_the_codes_words(name: str, state: RunState) -> None:
    rd = RunDir(FIXTURES / name)
    assert rd.state() is state
    view = rd.read()
    assert view.state is state and view.layout == 2 and view.record["schema_version"] == 2  # upgraded on reading
    raw = [json.loads(line) for line in rd.events.read_text().splitlines()]
    assert [e["test_mean"] for e in view.events] == [e["eval_mean"] for e in raw]
    assert [e["best_heldout_mean"] for e in view.events] == [e["best_eval_mean"] for e in raw]
    assert "eval_mean" not in view.events[0]
    if state is RunState.FINISHED:
        assert view.summary["best_heldout_mean"] == json.loads(rd.summary.read_text())["best_eval_mean"]
    steps, held = view.curve("best_heldout_mean", x="steps")
    assert steps == [float(e["env_steps_total"]) for e in raw] and held == [e["best_eval_mean"] for e in raw]
    assert view.env_id == name.split("/")[0]


def test_states_of_what_is_not_a_finished_run(tmp_path: Path) -> None:
    assert RunDir(tmp_path / "nothing").state() is RunState.NEW
    (tmp_path / "empty").mkdir()
    assert RunDir(tmp_path / "empty").state() is RunState.STALE
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "CartPole-v1" / "table", run)
    assert RunDir(run).state() is RunState.FINISHED
    (run / "summary.json").unlink()  # killed before it ended
    assert RunDir(run).state() is RunState.STARTED and RunDir(run).state().resumable
    (run / "summary.json").write_text(json.dumps({"stop_reason": "failed: OSError: disk full"}))
    assert RunDir(run).state() is RunState.FAILED
    (run / "config.json").write_text("{not json")
    assert RunDir(run).state() is RunState.STALE
    newer = tmp_path / "newer"
    shutil.copytree(FIXTURES / "CartPole-v1" / "table", newer)
    record = json.loads((newer / "config.json").read_text())
    (newer / "config.json").write_text(json.dumps({**record, "schema_version": SCHEMA_VERSION + 1}))
    assert RunDir(newer).state() is RunState.STALE  # a layout this version cannot read is no result of it


def test_a_resumed_layout_1_run_goes_on_in_layout_2(tmp_path: Path) -> None:
    run = tmp_path / "interrupted"
    shutil.copytree(FIXTURES / "CartPole-v1" / "interrupted", run)
    assert main(["train", "--resume", str(run), "--iterations", "3"]) == 0
    lines = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert ["schema_version" in e for e in lines] == [False, False, True]  # each line says its own layout
    view = RunDir(run).read()
    assert view.state is RunState.FINISHED and [e["iteration"] for e in view.events] == [1, 2, 3]
    assert all(e["best_heldout_mean"] is not None for e in view.events)
