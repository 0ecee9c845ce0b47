"""A new run's folder: the mode the umask gives, and the hidden staging folders that killed runs left.

A run is staged in ``logs/<env-id>/.<run-id>.<random>.starting`` (locked, its holder's note written) and renamed into
place (``llm_policy_gen/run/files.py``). ``mkdtemp`` made that folder 0700 whatever the umask, and a run killed with
``kill -9`` before the rename (while its model loaded) left the folder for good. The killed runs are child processes
that stage a run exactly as ``train`` does and are killed once they hold its lock: no timing is involved.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from llm_policy_gen.cli import main

ROOT = Path(__file__).resolve().parents[1]

_STAGE = """
import sys
from pathlib import Path
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.storage.locks import FolderLock
rd = RunDir.stage(Path(sys.argv[1]), "FrozenLake-v1", "offline", 0, sys.argv[2])
lock = FolderLock(rd.path, "the run directory").acquire()  # kept: a lock collected is released
print(rd.path, flush=True)
sys.stdin.read()
"""
"""A process that stages a run as ``train`` does (folder, lock, holder's note), says where, and waits."""


def _train(logs: Path, run_id: str) -> list[str]:
    return ["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1", "--logs-dir", str(logs),
            "--run-id", run_id, "--no-plots", "--no-progress", "--heldout-episodes", "5", "--no-cache"]


def _stager(logs: Path, run_id: str) -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _STAGE, str(logs), run_id], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the staging process said nothing"
    return proc, Path(line)


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask-022", "umask-027"])
def test_a_run_directory_gets_the_mode_the_umask_gives(tmp_path: Path, umask: int) -> None:
    logs = tmp_path / "logs"
    before = os.umask(umask)
    try:
        assert main(_train(logs, "r")) == 0
    finally:
        os.umask(before)
    run = logs / "FrozenLake-v1" / "r"
    assert stat.S_IMODE(run.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((run / "policies").stat().st_mode) == 0o777 & ~umask


def test_a_staging_folder_left_by_a_killed_run_is_removed_by_the_next_run_but_a_live_ones_is_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    killed, left = _stager(logs, "r")
    live, starting = _stager(logs, "r")
    try:
        killed.kill()  # SIGKILL: no handler runs, the folder stays, the kernel drops its lock
        assert killed.wait(timeout=60) == -signal.SIGKILL
        assert left.is_dir() and left.name.startswith(".r.") and left.name.endswith(".starting")
        (left / "big").write_bytes(b"\0" * 4096)  # what a model load may have put there
        refused = _train(logs, "r") + ["--mode", "lm-policy", "--lm-model", str(tmp_path / "missing.gguf")]
        refused.remove("offline")
        refused.remove("--backend")
        assert main(refused) == 2  # refused once its folder was staged: it changes nothing, the leftover included
        assert left.is_dir()
        capsys.readouterr()
        assert main(_train(logs, "r")) == 0
        err = capsys.readouterr().err
        assert not left.exists()
        assert f"note: removed {left}, the unfinished start of a run that was killed" in err, err
        assert starting.is_dir() and (starting / ".lock.holder.json").is_file()  # its run still holds the lock
        assert (logs / "FrozenLake-v1" / "r" / "summary.json").is_file()
    finally:
        assert live.stdin is not None
        live.stdin.close()
        live.wait(timeout=60)
    assert main(_train(logs, "r2")) == 0  # that one ended unpublished too: the next run removes it
    assert not starting.exists()
    assert sorted(p.name for p in (logs / "FrozenLake-v1").iterdir()) == ["r", "r2"]
