"""Helpers of the run tests: answers written by the package's own renderer, replay files,
FrozenLake paths and killed-then-resumed runs."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import MAPS

from llm_policy_gen.config import TrainConfig
from llm_policy_gen.envs import get_spec
from llm_policy_gen.envs.catalog import gym_id
from llm_policy_gen.envs.tailor import apply_env_kwargs
from llm_policy_gen.formats.base import FormatContext, Target
from llm_policy_gen.formats.table import TableFormat
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
LAKE8 = {"map_name": "8x8", "is_slippery": False}
#: FrozenLake moves: action -> (row step, column step).
MOVES = {0: (0, -1), 1: (1, 0), 2: (0, 1), 3: (-1, 0)}


def load_script(path: Path, name: str) -> Any:
    """A script of the repository (``tools/``, ``bench/``) imported as module ``name``, which it is registered as (a
    script's dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def quiet(_msg: str) -> None:
    pass


def cfg(tmp_path: Path, **kw: Any) -> TrainConfig:
    """A short run on the 4x4 lake without slip (the learner modes need nothing bigger to show their behaviour)."""
    base: dict[str, Any] = dict(env_id="FrozenLake-v1.deterministic", backend="offline", iterations=3,
                                logs_dir=str(tmp_path), progress=False, plots=False, heldout_episodes=10, cache=False)
    base.update(kw)
    return TrainConfig(**base)


def answer(values: Sequence[float] | np.ndarray, kind: str, env_kwargs: dict[str, Any] | None = None,
           rationale: str = "test answer") -> str:
    """A full-table answer for FrozenLake (``kind`` "value" or "action"), written by the package's renderer."""
    spec = apply_env_kwargs(get_spec("FrozenLake-v1.deterministic"), env_kwargs or {})
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    target = Target("action", n_actions=acts.n_actions) if kind == "action" else Target("value")
    ctx = FormatContext(obs, acts, target.array(np.zeros(obs.n_states)), target, spec)
    return TableFormat().render(target.array(values), ctx, rationale)


def write_replay(path: Path, text: Callable[[int, int], str], iterations: int, candidates: int = 1) -> str:
    """A replay file answering (iteration, candidate) with ``text(iteration, candidate)``; returns the backend."""
    path.write_text("".join(json.dumps({"iteration": it, "candidate": c, "response_text": text(it, c)}) + "\n"
                            for it in range(1, iterations + 1) for c in range(1, candidates + 1)))
    return f"replay:{path}"


def lake(map_name: str) -> list[str]:
    return list(MAPS[map_name])


def goal_distances(map_name: str) -> np.ndarray:
    """Steps from each cell to the goal around the holes (BFS; -1 where the goal cannot be reached)."""
    rows = lake(map_name)
    n = len(rows)
    dist = np.full(n * n, -1)
    goal = next(r * n + c for r in range(n) for c in range(n) if rows[r][c] == "G")
    dist[goal] = 0
    todo = deque([goal])
    while todo:
        s = todo.popleft()
        r, c = divmod(s, n)
        for dr, dc in MOVES.values():
            rr, cc = r - dr, c - dc
            if 0 <= rr < n and 0 <= cc < n and dist[rr * n + cc] < 0 and rows[rr][cc] not in "H":
                dist[rr * n + cc] = dist[s] + 1
                todo.append(rr * n + cc)
    return dist


def path_advice(map_name: str) -> np.ndarray:
    """In each cell, the move that brings the agent one step closer to the goal (0 where none does)."""
    rows, dist = lake(map_name), goal_distances(map_name)
    n = len(rows)
    table = np.zeros(n * n, dtype=np.int64)
    for s in range(n * n):
        r, c = divmod(s, n)
        for a, (dr, dc) in MOVES.items():
            rr, cc = min(max(r + dr, 0), n - 1), min(max(c + dc, 0), n - 1)
            if dist[s] > 0 and dist[rr * n + cc] == dist[s] - 1:
                table[s] = a
                break
    return table


def comparable(run_dir: Path) -> tuple[dict[str, Any], list[int], list[list[int]]]:
    """A run's summary without wall times, its best table and every iteration's table."""
    s = json.loads((run_dir / "summary.json").read_text())
    s.pop("wall_s")
    tables = [json.loads(p.read_text())["table"] for p in sorted((run_dir / "policies").glob("iter_*.json"))]
    return s, json.loads((run_dir / "best_policy.json").read_text())["table"], tables


#: What a run records of the machine it ran on, not of its result: wall times, and how many language-model
#: encodings and scores this process computed or read from the shared disk cache (a cold cache, as on a new machine,
#: gives forward passes where a warm one gives cache hits, and a resumed run counts only its last process's).
MACHINE_FIELDS = ("wall_s", "latency_s", "lm_forward_passes", "lm_encodings_from_cache", "lm_score_batches",
                  "lm_scores_from_cache")


def _without_wall(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_wall(v) for k, v in x.items() if k not in MACHINE_FIELDS}
    if isinstance(x, list):
        return [_without_wall(v) for v in x]
    return x


def run_records(run_dir: Path) -> dict[str, Any]:
    """Everything a run recorded, the machine's part aside (:data:`MACHINE_FIELDS`): its events, summary, every
    policy file, and the learner's state in its checkpoint (an own-loop mode's), arrays as lists."""
    from llm_policy_gen.run.checkpoint import load_checkpoint

    out: dict[str, Any] = {"events": _without_wall(read_jsonl(run_dir / "events.jsonl")),
                           "summary": _without_wall(json.loads((run_dir / "summary.json").read_text()))}
    for p in sorted((run_dir / "policies").glob("*.json")) + [run_dir / "best_policy.json"]:
        out[p.name] = json.loads(p.read_text())
    learner = load_checkpoint(run_dir / "checkpoint.npz").get("learner")
    out["learner"] = json.loads(json.dumps(learner, default=lambda a: np.asarray(a).tolist()))
    return out


def _cli(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "LLM_POLICY_GEN_WORKERS": "1"})


def kill_and_resume(tmp_path: Path, args: Sequence[str], env_id: str, iterations: int, after: int,
                    sig: int = signal.SIGKILL, records: Callable[[Path], Any] | None = None) -> tuple[Any, Any]:
    """Run ``train ARGS`` to the end (``ref``), run it again killed with ``sig`` once ``after`` iterations are
    logged, resume that one; returns the records of both (``records``, default :func:`comparable`)."""
    argv = ["train", "--env", env_id, "--iterations", str(iterations), "--logs-dir", str(tmp_path), "--no-plots",
            "--quiet", *args]
    ref = _cli(*argv, "--run-id", "ref")
    _, err = ref.communicate(timeout=300)
    assert ref.returncode == 0, err.decode()
    cut = _cli(*argv, "--run-id", "cut")
    folder = tmp_path / gym_id(env_id)  # a spec variant's runs are in its gymnasium id's folder
    events = folder / "cut" / "events.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not events.exists() or len(events.read_text().splitlines()) < after):
        time.sleep(0.005)
    cut.send_signal(sig)
    cut.wait(timeout=60)
    assert len(read_jsonl(events)) < iterations, "the run ended before it could be killed"
    again = _cli("train", "--resume", str(folder / "cut"), "--quiet")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode()
    assert [e["iteration"] for e in read_jsonl(events)] == list(range(1, iterations + 1))
    records = records or comparable
    return records(folder / "cut"), records(folder / "ref")
