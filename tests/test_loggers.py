"""``--log csv,tensorboard``: progress.csv and TensorBoard event files, read back as a user would read them."""

from __future__ import annotations

import csv
import sys
from functools import partial
from pathlib import Path

import pytest
from run_helpers import cfg as run_cfg
from run_helpers import quiet

from llm_policy_gen.cli import main
from llm_policy_gen.errors import UserError
from llm_policy_gen.loggers.writers import CSVWriter, TensorBoardWriter, make_writers, scalars
from llm_policy_gen.run import Run, resume, train
from llm_policy_gen.schema.aliases import events_in
from llm_policy_gen.storage.runlog import read_jsonl

cfg = partial(run_cfg, env_id="CartPole-v1", heldout_episodes=20, cache=True, log=["csv", "tensorboard"])


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def read_tensorboard(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of a run directory, through TensorBoard's own reader (restart purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_a_run_writes_one_csv_row_and_one_tensorboard_step_per_iteration(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    res = train(cfg(tmp_path), log=quiet)
    events = read_jsonl(res.run_dir / "events.jsonl")
    rows = read_csv(res.run_dir / "progress.csv")
    assert [int(r["time/iterations"]) for r in rows] == [1, 2, 3]
    for row, ev in zip(rows, events, strict=True):
        assert float(row["eval/best_test_mean"]) == pytest.approx(ev["best_test_mean"])
        assert float(row["eval/heldout_mean"]) == pytest.approx(ev["best_eval_mean"])
        assert int(row["time/episodes_total"]) == ev["episodes_total"]
        assert [float(row[f"candidates/test_mean_{k}"]) for k in (1, 2, 3, 4)] == pytest.approx(ev["candidate_means"])
    assert list(rows[0])[:3] == ["time/iterations", "time/episodes_total", "time/total_timesteps"]

    tb = read_tensorboard(res.run_dir)
    for tag in ("eval/best_test_mean", "eval/heldout_mean", "candidates/test_mean_1", "time/episodes_total",
                "time/total_timesteps", "llm/calls", "llm/input_tokens", "llm/output_tokens", "llm/cost_usd"):
        assert [step for step, _ in tb[tag]] == [1, 2, 3], tag
    assert [v for _, v in tb["eval/best_test_mean"]] == pytest.approx([e["best_test_mean"] for e in events])
    assert [v for _, v in tb["llm/calls"]] == [4, 4, 4]


def test_a_resumed_run_repeats_no_row_and_no_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after iteration 3 was logged but before its checkpoint: the resume redoes 3 and shows it once."""
    pytest.importorskip("tensorboard")
    real = Run.checkpoint
    calls = {"n": 0}

    def checkpoint(self: Run, *, now: bool = False) -> None:
        calls["n"] += 1
        if calls["n"] == 4:  # checkpoint 0 (start), 1, 2, then the one after iteration 3
            raise KeyboardInterrupt
        real(self, now=now)

    monkeypatch.setattr(Run, "checkpoint", checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train(cfg(tmp_path, iterations=5, run_id="cut"), log=quiet)
    rd = tmp_path / "CartPole-v1" / "cut"
    assert [int(r["time/iterations"]) for r in read_csv(rd / "progress.csv")] == [1, 2, 3]
    assert [s for s, _ in read_tensorboard(rd)["eval/best_test_mean"]] == [1, 2, 3]

    monkeypatch.setattr(Run, "checkpoint", real)
    resume(rd, log=quiet)
    events = read_jsonl(rd / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2, 3, 4, 5]
    rows = read_csv(rd / "progress.csv")
    assert [int(r["time/iterations"]) for r in rows] == [1, 2, 3, 4, 5]
    tb = read_tensorboard(rd)
    assert [s for s, _ in tb["eval/best_test_mean"]] == [1, 2, 3, 4, 5]
    assert [v for _, v in tb["time/episodes_total"]] == [e["episodes_total"] for e in events]
    assert len(list(rd.glob("events.out.tfevents.*"))) == 2


def test_csv_widens_its_header_when_a_new_column_appears(tmp_path: Path) -> None:
    w = CSVWriter(tmp_path)
    w.write({"iteration": 1, "best_test_mean": 10.0, "candidate_means": [1.0, 2.0]})
    w.write({"iteration": 2, "best_test_mean": 12.0, "candidate_means": [3.0, None, 5.0]})
    w.write({"iteration": 3, "best_test_mean": 12.0, "candidate_means": [4.0]})
    rows = read_csv(tmp_path / "progress.csv")
    assert [r["time/iterations"] for r in rows] == ["1", "2", "3"]
    assert [r["candidates/test_mean_3"] for r in rows] == ["", "5.0", ""]
    assert [r["candidates/test_mean_2"] for r in rows] == ["2.0", "", ""]  # candidate 2's answer was invalid
    assert [r["candidates/valid"] for r in rows] == ["2", "2", "1"]


def test_scalars_read_records_from_before_candidates(tmp_path: Path) -> None:
    """Version 1 records held the test mean in best_eval_mean and the held-out mean in heldout_mean."""
    old = {"iteration": 2, "best_eval_mean": 206.75, "heldout_mean": 200.3, "accepted": False, "eval_mean": 141.5,
           "episodes_total": 19, "validation_errors": ["x"]}
    s = scalars(events_in([old])[0][0])  # a line read from a file goes through the mapping first
    assert s["eval/best_test_mean"] == 206.75 and s["eval/heldout_mean"] == 200.3
    assert s["eval/accepted"] == 0 and s["llm/validation_errors"] == 1 and "candidates/valid" not in s


def test_unknown_logger_is_one_line_naming_the_close_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "1", "--logs-dir",
                 str(tmp_path), "--log", "csv,tensorbord", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "unknown logger 'tensorbord'" in err[-1] and "did you mean tensorboard" in err[-1]
    assert not list(tmp_path.glob("*/*"))  # the refused run left no directory


def test_missing_tensorboardx_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for name in [m for m in sys.modules if m == "tensorboardX" or m.startswith("tensorboardX.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(UserError, match=r"pip install -e '\.\[tensorboard\]'"):  # as the README installs it
        TensorBoardWriter(tmp_path)
    code = main(["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "1", "--logs-dir",
                 str(tmp_path), "--log", "tensorboard", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) >= 1 and "pip install -e '.[tensorboard]'" in err[-1]


def test_each_logger_name_is_made_once(tmp_path: Path) -> None:
    writers = make_writers(["csv", " CSV", ""], tmp_path)
    assert [type(w).__name__ for w in writers] == ["CSVWriter"]
