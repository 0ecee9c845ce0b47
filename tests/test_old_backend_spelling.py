"""``q-learning`` is a mode without a twin backend (issue 60 item 2): no backend registry line, no ``learner_mode``,
no ``pair_learner``. Its old spelling ``--backend q-learning`` is read in one place, where the configuration is built
(``schema/aliases.MOVED_BACKENDS``, ``TrainConfig``), so the command line, a TOML file, a ``compare`` entry and an old
run directory still run, with one deprecation line, and a comparison's entry keeps its run id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import llm_policy_gen.backends as backends
import llm_policy_gen.run.prepare as prepare_module
from llm_policy_gen.backends import BACKENDS, list_backends
from llm_policy_gen.cli import main
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.errors import UserError
from llm_policy_gen.sweep.methods import parse_method, parse_methods
from llm_policy_gen.sweep.task import RunTask

OLD_RUN = Path(__file__).parent / "data" / "rundirs_v1" / "logs" / "FrozenLake-v1" / "qlearning"
NOTE = "note: --backend q-learning is the old spelling of --mode q-learning (deprecated; it still works)"


def _train(logs: Path, run_id: str, *args: str) -> int:
    return main(["train", "--env", "FrozenLake-v1.deterministic", "--iterations", "2", "--heldout-episodes", "5",
                 "--logs-dir", str(logs), "--run-id", run_id, "--no-plots", "--no-progress", *args])


def _config(logs: Path, run_id: str) -> dict[str, Any]:
    record = json.loads((logs / "FrozenLake-v1" / run_id / "config.json").read_text(encoding="utf-8"))
    assert isinstance(record, dict)
    return record


def test_q_learning_is_no_backend() -> None:
    assert "q-learning" not in BACKENDS and "q-learning" not in {r["name"] for r in list_backends()}
    assert not hasattr(backends, "learner_mode") and not hasattr(prepare_module, "pair_learner")


def test_the_backends_command_does_not_list_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)["backends"]]
    assert "q-learning" not in names and "kept-table-q" in names


def test_the_old_spelling_runs_the_mode_with_one_deprecation_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert _train(tmp_path, "old", "--backend", "q-learning") == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "old spelling" in line] == [NOTE], err
    assert _train(tmp_path, "new", "--mode", "q-learning") == 0
    assert "old spelling" not in capsys.readouterr().err
    old, new = _config(tmp_path, "old")["config"], _config(tmp_path, "new")["config"]
    assert {k: v for k, v in old.items() if k != "run_id"} == {k: v for k, v in new.items() if k != "run_id"}
    # what runs recorded before the twin backend went: the mode, and the backend it spells, both explicit
    recorded = json.loads((OLD_RUN / "config.json").read_text(encoding="utf-8"))["config"]
    assert (new["backend"], new["mode"]) == (recorded["backend"], recorded["mode"]) == ("q-learning", "q-learning")
    assert {"backend", "mode"} <= set(new["explicit"])


def test_a_toml_file_with_the_old_spelling_runs_the_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "old.toml"
    toml.write_text('[train]\nbackend = "q-learning"\n', encoding="utf-8")
    assert _train(tmp_path, "toml", "--config", str(toml)) == 0
    assert NOTE in capsys.readouterr().err
    assert _config(tmp_path, "toml")["mode"] == "q-learning"
    toml.write_text('backend = "q-learning"\nmode = "reward"\n', encoding="utf-8")
    assert _train(tmp_path, "refused", "--config", str(toml)) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "does not answer --mode reward" in err and "kept-table-q" in err
    assert not (tmp_path / "FrozenLake-v1" / "refused").exists()


def test_the_configuration_is_resolved_where_it_is_built() -> None:
    by_backend = TrainConfig.build(({"backend": "q-learning"}, "test"))
    assert (by_backend.mode, by_backend.backend) == ("q-learning", "q-learning")
    lm = TrainConfig.build(({"mode": "lm-policy"}, "test"))
    assert lm.backend == "offline" and "backend" in lm.explicit  # recorded as lm-policy runs recorded it
    with pytest.raises(UserError, match="--mode q-learning proposes nothing and asks no backend; drop --backend"):
        TrainConfig.build(({"mode": "q-learning", "backend": "offline"}, "test"))


def test_a_compare_entry_of_the_old_spelling_keeps_its_run_id(tmp_path: Path) -> None:
    old, new = parse_method("q-learning"), parse_method("@q-learning")
    assert old.run_id(3) == new.run_id(3) == "q-learning_s3"
    assert old.backend_spec is None and new.backend_spec is None  # no backend: none is built, none is limited
    assert old.run_mode({"mode": "reward"}) == "q-learning"  # the entry names the mode
    assert old.display() == "q-learning"  # shown as written, as before
    task = RunTask("FrozenLake-v1.deterministic", "q-learning", 0, str(tmp_path))
    cfg = task.config()
    assert (cfg.mode, cfg.backend) == ("q-learning", "q-learning")
    from llm_policy_gen.schema.aliases import take_notes

    take_notes()
    parse_methods("offline,q-learning")
    assert take_notes() == ["note: --methods entry q-learning is the old spelling of @q-learning (deprecated; it "
                            "still works, its runs keep their ids)"]
    with pytest.raises(UserError, match="q-learning is the old spelling of @q-learning, a mode, not a backend"):
        parse_method("q-learning@reward")


def test_an_old_q_learning_run_resumes_evaluates_and_reports(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "logs" / "FrozenLake-v1" / "qlearning"
    shutil.copytree(OLD_RUN, run)
    assert json.loads((run / "config.json").read_text())["config"]["backend"] == "q-learning"
    summary = json.loads((run / "summary.json").read_text())
    assert main(["evaluate", str(run), "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["mean"] == pytest.approx(summary["best_eval_mean"])
    assert main(["report", str(run), "--out", str(tmp_path / "page.html")]) == 0
    before = (run / "events.jsonl").read_text().splitlines()
    assert main(["train", "--resume", str(run), "--iterations", "4", "--no-progress", "--quiet"]) == 0
    assert "old spelling" not in capsys.readouterr().err  # a record is no spelling to correct
    after = (run / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in after] == [1, 2, 3, 4] and after[:3] == before
    resumed = json.loads((run / "config.json").read_text())
    assert (resumed["mode"], resumed["config"]["backend"]) == ("q-learning", "q-learning")
