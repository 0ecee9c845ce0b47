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
    assert {"noise.py", "real_llm.py"} <= set(SCRIPTS)


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


FOLDER_OUT = ["lm_features.py", "lm_trpo_vs_ppo.py", "real_llm.py", "noise.py"]
"""The scripts whose ``--out`` is a folder (``lm_zero_shot.py``'s is a JSON file)."""


@pytest.mark.parametrize("script", FOLDER_OUT)
def test_an_out_that_is_a_file_is_refused_and_left_as_it_was(script: str, tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("mine")
    for out in (blocker, blocker / "sub"):
        done = _run(script, "--out", str(out), cwd=tmp_path)
        assert done.returncode == 2 and "is a file, not a folder" in done.stderr and "Traceback" not in done.stderr
    assert blocker.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_noise_passes_on_the_trains_own_line_when_a_run_is_refused(tmp_path: Path) -> None:
    done = _run("noise.py", "--seeds", "0", "--iterations", "1", "--extra=--bogus", "--out", str(tmp_path / "o"),
                cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "noise: FrozenLake-v1.deterministic seed 0:" in done.stderr and "--bogus" in done.stderr


def test_lm_zero_shot_refuses_bad_run_seeds_before_loading_a_model(tmp_path: Path) -> None:
    done = _run("lm_zero_shot.py", "--run-seeds", "x", "--lm-model", str(tmp_path / "none.gguf"),
                "--out", str(tmp_path / "z.json"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "bad --run-seeds 'x'" in done.stderr and list(tmp_path.iterdir()) == []


FILE_OUT = {"lm_zero_shot.py": ["--lm-model", "none.gguf"]}
"""The scripts whose ``--out`` is a file, with the arguments they need to get as far as reading it."""
REPORT_ONLY = {"lm_features.py": ["--report-only"], "lm_trpo_vs_ppo.py": ["--report-only"]}
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
    assert "cannot be written to" in _one_line(_run("noise.py", "--out", str(locked / "o"), cwd=tmp_path))
