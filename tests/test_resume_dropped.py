"""``train --resume`` after a process killed outright while its checkpoints waited (``run/pace.py``: a state over
32 MiB is written every few iterations): the iterations recorded after the last checkpoint written are cut and
redone, and the console says so in one line, with how many and from which iteration the run goes on. The runs are
the standard Q-learner's, whose iterations ask no model (an iteration that did is checkpointed at once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.run import pace
from llm_policy_gen.storage.runlog import read_jsonl

ENV = "FrozenLake-v1"


def _train(logs: Path, iterations: int) -> list[str]:
    return ["train", "--env", ENV, "--backend", "q-learning", "--seed", "3", "--iterations", str(iterations),
            "--heldout-episodes", "5", "--no-plots", "--no-progress", "--logs-dir", str(logs)]


def test_a_resume_from_a_checkpoint_that_waited_names_what_it_drops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(_train(logs, 1)) == 0
    (run,) = (logs / ENV).iterdir()
    first = (run / "checkpoint.npz").read_bytes()
    assert main(["train", "--resume", str(run), "--iterations", "4"]) == 0
    events = read_jsonl(run / "events.jsonl")
    # What a kill -9 leaves while iterations 2-4 waited for their checkpoint: iteration 1's checkpoint, four events.
    (run / "checkpoint.npz").write_bytes(first)
    (run / "summary.json").unlink()
    monkeypatch.setattr(pace, "PACE_ABOVE_BYTES", 0)  # this small checkpoint stands for one over 32 MiB
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "4"]) == 0
    said = [x for x in capsys.readouterr().err.splitlines() if "dropped" in x]
    assert said == ["note: dropped 3 recorded iterations (iterations 2..4) finished after the last checkpoint "
                    "written; the run goes on from iteration 2, redoing them"]
    redone = read_jsonl(run / "events.jsonl")
    assert [e["iteration"] for e in redone] == [1, 2, 3, 4]
    assert [e["eval_mean"] for e in redone] == [e["eval_mean"] for e in events]  # redone to the same result


def test_the_one_iteration_a_kill_between_its_event_and_its_checkpoint_left_is_named_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert main(_train(logs, 1)) == 0
    (run,) = (logs / ENV).iterdir()
    first = (run / "checkpoint.npz").read_bytes()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "2"]) == 0
    assert "dropped" not in capsys.readouterr().err  # a resume that cuts nothing says nothing of it
    (run / "checkpoint.npz").write_bytes(first)
    (run / "summary.json").unlink()
    assert main(["train", "--resume", str(run), "--iterations", "2"]) == 0
    said = [x for x in capsys.readouterr().err.splitlines() if "dropped" in x]
    assert said == ["note: dropped 1 recorded iteration (iteration 2) finished after the last checkpoint written; the "
                    "run goes on from iteration 2, redoing them"]
