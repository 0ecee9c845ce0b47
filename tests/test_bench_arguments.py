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


FOLDER_OUT = ["suite.py", "peers.py", "tune_specs.py", "lm_features.py", "lm_trpo_vs_ppo.py", "real_llm.py",
              "noise.py"]
"""The scripts whose ``--out`` is a folder (``lm_zero_shot.py``'s and ``qlearning_tune.py``'s is a JSON file)."""


@pytest.mark.parametrize("script", FOLDER_OUT)
def test_an_out_that_is_a_file_is_refused_and_left_as_it_was(script: str, tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("mine")
    for out in (blocker, blocker / "sub"):
        done = _run(script, "--out", str(out), cwd=tmp_path)
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


def test_noise_passes_on_the_trains_own_line_when_a_run_is_refused(tmp_path: Path) -> None:
    done = _run("noise.py", "--seeds", "0", "--iterations", "1", "--extra=--bogus", "--out", str(tmp_path / "o"),
                cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "noise: FrozenLake-v1.deterministic seed 0:" in done.stderr and "--bogus" in done.stderr


def test_qlearning_tune_reads_a_run_that_ended_before_its_first_iteration(tmp_path: Path) -> None:
    """A budget smaller than one iteration's episodes leaves no events.jsonl: no optimum reached, no crash."""
    done = _run("qlearning_tune.py", "--seeds", "100", "--budgets", "CliffWalking-v1=5,Taxi-v4=5", "--workers", "1",
                "--out", str(tmp_path / "q.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "-13 first held out after None" in done.stdout


def test_lm_zero_shot_refuses_bad_run_seeds_before_loading_a_model(tmp_path: Path) -> None:
    done = _run("lm_zero_shot.py", "--run-seeds", "x", "--lm-model", str(tmp_path / "none.gguf"),
                "--out", str(tmp_path / "z.json"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "bad --run-seeds 'x'" in done.stderr and list(tmp_path.iterdir()) == []
