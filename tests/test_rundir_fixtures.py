"""Run directories of layout 1 (``tests/data/rundirs_v1``, made by 83e45a3) still evaluate, report, resume and
compare to their figures: what a user's old runs look like must keep working whatever the layout of today."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from llm_policy_gen.cli import main

FIXTURES = Path(__file__).parent / "data" / "rundirs_v1"
FINISHED = ["CartPole-v1/table", "FrozenLake-v1/direct", "FrozenLake-v1/reward", "FrozenLake-v1/advisor",
            "FrozenLake-v1/qlearning", "FrozenLake-v1/lm-onehot"]


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    out = tmp_path / "fx"
    shutil.copytree(FIXTURES, out)
    return out


def _summary(run: Path) -> dict[str, object]:
    return json.loads((run / "summary.json").read_text())


@pytest.mark.parametrize("name", FINISHED)
def test_an_old_run_evaluates_to_its_recorded_mean(name: str, copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy / "logs" / name
    if name.endswith("lm-onehot"):
        pytest.importorskip("stable_baselines3")
    assert main(["evaluate", str(run), "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summary = _summary(run)
    assert got["mean"] == pytest.approx(summary["best_eval_mean"]) and got["episodes"] == summary["best_eval_episodes"]


@pytest.mark.parametrize("name", [*FINISHED, "CartPole-v1/interrupted"])
def test_an_old_run_reports(name: str, copy: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    assert main(["report", str(copy / "logs" / name), "--out", str(page)]) == 0
    assert page.stat().st_size > 1000


def test_an_old_interrupted_run_resumes_to_its_end(copy: Path) -> None:
    run = copy / "logs" / "CartPole-v1" / "interrupted"
    assert _summary(run)["stop_reason"] == "interrupted"
    before = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert main(["train", "--resume", str(run), "--iterations", "4"]) == 0
    after = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["iteration"] for e in after] == [1, 2, 3, 4]
    assert after[:2] == before  # what was recorded stays as it was
    assert _summary(run)["stop_reason"] == "iterations done"


def test_an_old_compare_folder_regenerates_its_table(copy: Path) -> None:
    folder = copy / "compare"
    with (folder / "results.csv").open() as f:
        before = list(csv.DictReader(f))
    (folder / "results.csv").unlink()
    summaries = {p: p.read_bytes() for p in folder.glob("runs/*/*/summary.json")}
    assert main(["compare", "--env", "FrozenLake-v1.deterministic", "--backends", "offline,random", "--seeds", "0-1",
                 "--iterations", "2", "--heldout-episodes", "20", "--out", str(folder)]) == 0  # skips every run
    assert {p: p.read_bytes() for p in folder.glob("runs/*/*/summary.json")} == summaries  # no run ran again
    with (folder / "results.csv").open() as f:
        after = list(csv.DictReader(f))
    figures = ("best_eval_mean", "episodes_total", "env_steps_total", "solved", "backend", "seed")
    assert [{k: r[k] for k in figures} for r in after] == [{k: r[k] for k in figures} for r in before]
