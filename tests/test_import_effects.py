"""Importing the package changes nothing outside it: no matplotlib backend chosen, no pyplot state, no umask set
(a notebook or a threaded program that imports it keeps its own); drawing a run's plots does not either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, sys
umask_calls = []
real_umask = os.umask
os.umask = lambda mask: (umask_calls.append(mask), real_umask(mask))[1]
import matplotlib
raw_backend = lambda: dict.__getitem__(matplotlib.rcParams, "backend")
before = raw_backend()
import llm_policy_gen.cli, llm_policy_gen.commands.compare, llm_policy_gen.commands.plot, llm_policy_gen.loggers.writers
import llm_policy_gen.plotting.curves, llm_policy_gen.plotting.table_figure, llm_policy_gen.storage.runlog
out = {"import": {"pyplot": "matplotlib.pyplot" in sys.modules, "backend_changed": raw_backend() != before,
                  "umask_calls": list(umask_calls)}}
from llm_policy_gen.cli import main
code = main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "2", "--heldout-episodes", "5",
             "--logs-dir", sys.argv[1], "--run-id", "r", "--quiet"])
out["train"] = {"code": code, "pyplot": "matplotlib.pyplot" in sys.modules, "backend_changed": raw_backend() != before}
print(json.dumps(out))
"""


def test_importing_and_plotting_leave_the_process_as_it_was(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "logs")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["import"] == {"pyplot": False, "backend_changed": False, "umask_calls": []}
    assert seen["train"] == {"code": 0, "pyplot": False, "backend_changed": False}
    run = tmp_path / "logs" / "FrozenLake-v1" / "r"
    for name in ("training.png", "testing.png"):
        assert (run / name).read_bytes().startswith(b"\x89PNG"), name
