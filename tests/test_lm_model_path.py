"""``--lm-model PATH`` that is not a regular file or a model folder (a FIFO, a device) is refused in one line without
being opened: reading a FIFO would wait for ever for a writer, a device would be read as a model."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_policy_gen.lm import EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """In a subprocess, so that a read that blocks (the bug) ends the test with its timeout instead of hanging it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_model_identity_refuses_what_is_not_a_regular_file_without_opening_it(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "model.gguf"
        os.mkfifo(path)
    else:
        path = tmp_path / "zero.gguf"
        path.symlink_to("/dev/zero")
    done = _run("import sys\nfrom llm_policy_gen.errors import UserError\nfrom llm_policy_gen.lm.backbone import "
                "model_identity\ntry:\n    model_identity(sys.argv[1])\nexcept UserError as e:\n    print(e)\n",
                str(path))
    assert done.returncode == 0, done.stderr
    assert "is not a regular file (a FIFO, a device or a socket)" in done.stdout


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in EXTRA_MODULES),
                    reason="the lm-policy extra is not installed (make test installs it)")
def test_train_refuses_a_fifo_as_lm_model_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    logs = tmp_path / "logs"
    done = _run("import sys\nfrom llm_policy_gen.cli import main\nsys.exit(main(sys.argv[1:]))", "train", "--env",
                "FrozenLake-v1", "--mode", "lm-policy", "--lm-model", str(fifo), "--logs-dir", str(logs),
                "--no-plots", "--no-progress")
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "is not a regular file" in lines[0] and not [p for p in logs.rglob("*") if p.is_file()]
