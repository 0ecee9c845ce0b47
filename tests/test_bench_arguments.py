"""Every bench script that takes ``--seeds`` refuses a bad one as the product's commands do: one line on stderr,
exit 2, no traceback and no output folder made. Run as a user runs them (a subprocess each, about half a second)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py") if 'add_argument("--seeds"' in p.read_text())


def test_the_scripts_with_seeds_are_found() -> None:
    assert {"suite.py", "peers.py", "tune_specs.py", "noise.py", "qlearning_tune.py", "real_llm.py"} <= set(SCRIPTS)


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


@pytest.mark.parametrize("script", ["suite.py", "peers.py", "tune_specs.py"])
def test_an_out_that_is_a_file_is_refused_and_left_as_it_was(script: str, tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("mine")
    for out in (blocker, blocker / "sub"):
        done = _run(script, "--tasks", "cartpole", "--seeds", "100", "--out", str(out), cwd=tmp_path)
        assert done.returncode == 2 and "is a file, not a folder" in done.stderr and "Traceback" not in done.stderr
    assert blocker.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_the_suite_refuses_an_unknown_backend_before_making_its_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run("suite.py", "--tasks", "cartpole", "--backends", "offline,nope", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2 and "unknown backend 'nope'" in done.stderr and done.stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.py")
                                          if 'add_argument("--workers"' in p.read_text()))
def test_workers_below_one_is_one_line_and_exit_2(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run(script, "--workers", "0", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2 and "--workers must be at least 1, not 0" in done.stderr
    assert done.stderr.count("\n") == 1 and not out.exists() and list(tmp_path.iterdir()) == []
