"""The ``noise`` suite (bench/noise.py and bench/drift.py before issue 61): ``bench noise`` runs ``offline`` with and
without its paired confirmation on noisy tasks, each record carries its run's drift (read through the run-directory
reader), and the suite's table has the drift columns, which agree with ``llm-policy-gen drift`` over the same runs.
A suite's extra tables and a method's tasks are checked when the suite is read."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_bench_command import METHODS, TASKS, bench, write_suite

from llm_policy_gen.cli import main
from llm_policy_gen.suites.definition import load_suite
from llm_policy_gen.suites.store import read_records

SHIPPED = Path(__file__).resolve().parents[1] / "llm_policy_gen" / "suites" / "data" / "noise.toml"


def test_the_noise_suite_is_the_keeper_with_and_without_its_confirmation_on_noisy_tasks() -> None:
    suite = load_suite("noise")
    assert suite.tables == ("drift",)
    assert [(m.label, m.budget, m.iterations) for m in suite.methods] == [("offline", "own", 20),
                                                                          ("offline-noconfirm", "own", 20)]
    assert suite.method("offline-noconfirm").entry.endswith("[confirm_episodes=0]")
    lake, blackjack = suite.tasks
    assert lake.env_id == "FrozenLake-v1.deterministic" and lake.settings == {"env_kwargs": {"is_slippery": True}}
    assert blackjack.env_id == "Blackjack-v1" and all(t.seeds == (0, 1, 2, 3, 4) for t in suite.tasks)


@pytest.mark.slow
def test_bench_noise_tables_the_drift_that_the_drift_command_counts(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # a copy of the shipped suite: its committed store (beside the copy) is empty, whatever the project has published
    (tmp_path / "suite").mkdir()
    copy = tmp_path / "suite" / "noise.toml"
    copy.write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["bench", str(copy), "--tasks", "blackjack", "--seeds", "0", "--out", str(out), "--no-progress"]) == 0
    records = read_records(out)
    assert sorted(r.method for r in records) == ["offline", "offline-noconfirm"]
    assert all({"adoptions", "measurable_adoptions", "drifted_down"} <= set(r.result) for r in records)

    capsys.readouterr()
    assert main(["drift", str(out), "--json"]) == 0
    counted = json.loads(capsys.readouterr().out)["totals"]
    with open(out / "noise_drift.csv", newline="", encoding="utf-8") as fh:
        rows = {(r["task"], r["method"]): r for r in csv.DictReader(fh)}
    assert set(rows) == {("blackjack", "offline"), ("blackjack", "offline-noconfirm"), ("all", "all")}
    for key in ("runs", "adoptions", "measurable_adoptions", "drifted_down", "runs_with_any",
                "runs_with_more_than_one"):
        assert int(rows[("all", "all")][key]) == counted[key], key
    assert counted["adoptions"] == sum(r.result["adoptions"] for r in records) > 0
    text = (out / "noise.md").read_text(encoding="utf-8")
    head = "| task | method | runs | adoptions (measurable) | drifted down | runs with any | runs with more than one |"
    assert head in text and "| blackjack | offline-noconfirm | 1 |" in text


@pytest.mark.parametrize(("extra", "says"), [
    ('tables = ["nope"]\n', "tables names 'nope'; accepted: drift, answers"),
    ('tables = "drift"\n', "tables must be a list of names"),
])
def test_a_suite_asking_for_an_unknown_table_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, says: str) -> None:
    path = write_suite(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace('seeds = "0-1"\n', f'seeds = "0-1"\n{extra}', 1))
    assert bench(path, tmp_path / "out", "--list") == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_method_runs_on_the_tasks_it_names_and_a_stray_name_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    only = METHODS.replace('entry = "@q-learning"\n', 'entry = "@q-learning"\ntasks = ["cliff"]\n', 1)
    assert bench(write_suite(tmp_path, methods=only, tasks=TASKS), tmp_path / "out", "--list",
                 "--methods", "offline,q-learning") == 0
    listed = capsys.readouterr().out
    assert "cliff/q-learning seed 0" in listed and "cartpole/q-learning" not in listed
    assert "cartpole/offline seed 0" in listed
    stray = METHODS.replace('entry = "@q-learning"\n', 'entry = "@q-learning"\ntasks = ["moon"]\n', 1)
    assert bench(write_suite(tmp_path, methods=stray, tasks=TASKS, name="stray"), tmp_path / "out", "--list") == 2
    assert "method q-learning's tasks name 'moon', not a task of it" in capsys.readouterr().err
