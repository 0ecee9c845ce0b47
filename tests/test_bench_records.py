"""bench/records.py: a bench folder's records carried to and from the repository's bench/data, record by record, so
that neither a new machine's fresh folder nor an old copy loses a record the other side holds."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("records")


def run(task: str, seed: int, heldout: float, backend: str = "offline") -> dict[str, object]:
    return {"task": task, "backend": backend, "seed": seed, "heldout": heldout}


def write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def test_keep_then_restore_lose_no_record_of_either_side(records: ModuleType, tmp_path: Path) -> None:
    data, out, fresh = tmp_path / "data", tmp_path / "suite", tmp_path / "fresh"
    write(data / "suite" / "results.json", [run("taxi", 0, 1.0), run("taxi", 1, 2.0)])
    write(data / "suite" / "priors.json", {"heldout_episodes": 100, "tasks": {
        "taxi": {"env_id": "Taxi-v4", "table": "t", "by_seed": {"0": -5.0}}}})
    write(data / "suite" / "suite.md", "old page")
    write(data / "tune" / "tune_runs.json", [{"run_dir": "/gone/swimmer_b2000_offline_s100", "heldout": 300.0}])

    assert records.main(["restore", "--suite", str(out), "--tune", str(tmp_path / "tune"), "--data", str(data)]) == 0
    assert (out / "suite.md").read_text() == "old page"
    # the folder goes on: a record changes, one is new, a seed's prior is measured
    write(out / "results.json", [run("taxi", 0, 1.0), run("taxi", 1, 2.5), run("taxi", 2, 3.0)])
    priors = json.loads((out / "priors.json").read_text())
    priors["tasks"]["taxi"]["by_seed"]["1"] = -6.0
    write(out / "priors.json", priors)
    write(out / "suite.md", "new page")

    assert records.main(["keep", "--suite", str(out), "--tune", str(tmp_path / "tune"), "--data", str(data)]) == 0
    kept = {(r["seed"]): r["heldout"] for r in json.loads((data / "suite" / "results.json").read_text())}
    assert kept == {0: 1.0, 1: 2.5, 2: 3.0}
    assert json.loads((data / "suite" / "priors.json").read_text())["tasks"]["taxi"]["by_seed"] == {"0": -5.0,
                                                                                                    "1": -6.0}
    assert (data / "suite" / "suite.md").read_text() == "new page"
    assert len(json.loads((data / "tune" / "tune_runs.json").read_text())) == 1

    # a fresh folder that was not restored: its one record joins, nothing of bench/data goes, the page stays
    write(fresh / "results.json", [run("taxi", 3, 4.0)])
    write(fresh / "suite.md", "partial page")
    assert records.main(["keep", "--suite", str(fresh), "--tune", str(tmp_path / "none"), "--data", str(data)]) == 0
    assert len(json.loads((data / "suite" / "results.json").read_text())) == 4
    assert (data / "suite" / "suite.md").read_text() == "new page"


def test_restore_keeps_the_folders_own_record_where_both_hold_one(records: ModuleType, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "suite"
    write(data / "suite" / "results.json", [run("taxi", 0, 1.0), run("taxi", 1, 2.0)])
    write(out / "results.json", [run("taxi", 0, 9.0)])
    assert records.main(["restore", "--suite", str(out), "--tune", str(tmp_path / "t"), "--data", str(data)]) == 0
    got = {r["seed"]: r["heldout"] for r in json.loads((out / "results.json").read_text())}
    assert got == {0: 9.0, 1: 2.0}


def test_keep_with_no_folder_or_a_file_for_one_is_one_line_and_exit_2(
        records: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    assert records.main(["keep", "--suite", str(tmp_path / "a"), "--tune", str(tmp_path / "b"),
                         "--data", str(data)]) == 2
    (tmp_path / "file").write_text("x")
    assert records.main(["restore", "--suite", str(tmp_path / "file"), "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "neither" in err[0] and "is a file, not a folder" in err[1]
    assert not data.exists()


def test_keep_moves_an_older_tune_jsons_run_records_into_tune_runs_json(records: ModuleType, tmp_path: Path) -> None:
    """A folder (or bench/data) whose tune.json still holds its runs' whole records: kept, the entries name their
    runs and tune_runs.json holds each record once; the folder itself is not changed."""
    data, tune = tmp_path / "data", tmp_path / "tune"
    rec = {"run_dir": "/gone/pendulum_b200_offline_s100", "heldout": -150.0}
    old = {"pendulum": {"task": "pendulum", "points": [], "records": [{**rec, "reused": True}]}}
    write(data / "tune" / "tune.json", {"lunar": {"task": "lunar", "records": [{"run_dir": "/gone/l", "heldout": 1}]}})
    write(tune / "tune.json", old)
    assert records.main(["keep", "--suite", str(tmp_path / "none"), "--tune", str(tune), "--data", str(data)]) == 0
    kept = json.loads((data / "tune" / "tune.json").read_text())
    assert kept == {"lunar": {"task": "lunar", "runs": ["l"]},
                    "pendulum": {"task": "pendulum", "points": [], "runs": ["pendulum_b200_offline_s100"]}}
    assert json.loads((data / "tune" / "tune_runs.json").read_text()) == [{"run_dir": "/gone/l", "heldout": 1}, rec]
    assert json.loads((tune / "tune.json").read_text()) == old
