"""The sweep's survey of what earlier invocations left (``sweep/plan.survey``) reads each run's files once: the
state, the record and the summary come from one reading (``RunDir.survey``), as ``RunDir.state()`` decides them."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm_policy_gen.run import files
from llm_policy_gen.run.files import RunDir, RunState
from llm_policy_gen.sweep import plan

FINISHED = Path(__file__).resolve().parent / "data" / "rundirs_v1" / "compare" / "runs" / "FrozenLake-v1" / "offline_s0"


def test_the_survey_reads_config_and_summary_once_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "offline_s0"
    shutil.copytree(FINISHED, run)
    reads: list[str] = []
    real = files.read_json_object

    def counted(path: Path, **kw: object) -> object:
        reads.append(Path(path).name)
        return real(path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "read_json_object", counted)
    found = plan.survey([SimpleNamespace(run_id="offline_s0", run_dir=run)])["offline_s0"]  # type: ignore[list-item]
    assert found.state == "finished" and found.config is not None and found.summary is not None
    assert found.config["mode"] == "table" and isinstance(found.summary.get("best_eval_mean"), float)
    assert sorted(reads) == ["config.json", "summary.json"]  # not config.json twice, as before


def test_survey_says_what_state_says(tmp_path: Path) -> None:
    assert RunDir(tmp_path / "none").survey() == (RunState.NEW, None, None)
    (tmp_path / "stale").mkdir()
    assert RunDir(tmp_path / "stale").survey()[0] == RunDir(tmp_path / "stale").state() == RunState.STALE
    state, record, summary = RunDir(FINISHED).survey()
    assert state == RunDir(FINISHED).state() == RunState.FINISHED and record and summary
