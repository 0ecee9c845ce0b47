"""Every bench script that takes ``--seeds`` refuses a bad one as the product's commands do: one line on stderr,
exit 2, no traceback and no output folder made. Run as a user runs them (a subprocess each, about half a second)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py") if 'add_argument("--seeds"' in p.read_text())


def test_the_scripts_with_seeds_are_found() -> None:
    assert {"tune_specs.py", "qlearning_tune.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("seeds", ["x", "5-1"])
def test_a_bad_seeds_argument_is_one_line_and_exit_2(script: str, seeds: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--seeds", seeds, "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert f"bad --seeds {seeds!r}" in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


FOLDER_OUT = ["tune_specs.py"]
"""The scripts whose ``--out`` is a folder (``qlearning_tune.py``'s is a JSON file)."""


@pytest.mark.parametrize("script", FOLDER_OUT)
def test_an_out_that_is_a_file_is_refused_and_left_as_it_was(script: str, tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("mine")
    for out in (blocker, blocker / "sub"):
        done = _run(script, "--out", str(out), cwd=tmp_path)
        assert done.returncode == 2 and "is a file, not a folder" in done.stderr and "Traceback" not in done.stderr
    assert blocker.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["results"]


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.py")
                                          if 'add_argument("--workers"' in p.read_text()))
def test_workers_below_one_is_one_line_and_exit_2(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run(script, "--workers", "0", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2 and "--workers must be at least 1, not 0" in done.stderr
    assert done.stderr.count("\n") == 1 and not out.exists() and list(tmp_path.iterdir()) == []


def test_qlearning_tune_reads_a_run_that_ended_before_its_first_iteration(tmp_path: Path) -> None:
    """A budget smaller than one iteration's episodes leaves no events.jsonl: no optimum reached, no crash."""
    done = _run("qlearning_tune.py", "--seeds", "100", "--budgets", "CliffWalking-v1=5,Taxi-v4=5", "--workers", "1",
                "--out", str(tmp_path / "q.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "-13 first held out after None" in done.stdout


FILE_OUT = {"qlearning_tune.py": ["--seeds", "100"]}
"""The scripts whose ``--out`` is a file, with the arguments they need to get as far as reading it."""
REPORT_ONLY = {"tune_specs.py": ["--report-only"]}
"""The scripts that rewrite their report from their ``--out`` folder and exit."""


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize("script", FOLDER_OUT + sorted(FILE_OUT))
def test_an_empty_out_is_refused_and_nothing_is_written_here(script: str, tmp_path: Path) -> None:
    """``--out ""`` would be the current folder (``Path("")`` is ``.``)."""
    assert "--out is empty" in _one_line(_run(script, *FILE_OUT.get(script, []), "--out", "", cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("script", "extra"), [(s, []) for s in FOLDER_OUT] + list(REPORT_ONLY.items())
                         + [(s, a) for s, a in FILE_OUT.items()])
@pytest.mark.parametrize("out", ["/proc/self", "/proc/self/results"])
def test_an_out_in_the_kernels_folder_is_one_line_not_a_traceback_or_a_hang(script: str, extra: list[str], out: str,
                                                                            tmp_path: Path) -> None:
    line = _one_line(_run(script, *extra, "--out", out, cwd=tmp_path))
    assert "/proc" in line and list(tmp_path.iterdir()) == []


def test_a_folder_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere
        pytest.skip("this user can write to a read-only folder")
    if not FOLDER_OUT:
        pytest.skip("no bench script takes a folder --out")
    assert "cannot be written to" in _one_line(_run(FOLDER_OUT[0], "--out", str(locked / "o"), cwd=tmp_path))


def test_tune_specs_refuses_a_corrupt_tune_json(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    out.mkdir()
    (out / "tune.json").write_text("[")
    line = _one_line(_run("tune_specs.py", "--report-only", "--out", str(out), cwd=tmp_path))
    assert "tune.json cannot be read as JSON" in line
