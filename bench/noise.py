"""How often does the keeper adopt a table that is worse on held-out episodes? (issue 8, "Noise")

Runs the offline backend on noisy tasks (slippery FrozenLake, Blackjack) for several seeds, then replays each run's
sequence of adopted tables on the run's held-out seeds and counts the adoptions that lowered the held-out mean by
more than two standard errors of the paired difference. Prints one line per run and the total.

    python bench/noise.py [--iterations 20] [--seeds 0-4] [--out /tmp/noise]

Works on any run directory layout since version 1 (it reads policies/iter_NNNN.json and their ``accepted`` flag).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from llm_policy_gen.envs.catalog import gym_id

# The slippery lake as measured (docs/index.md): the seed project's spec and its training settings
# (FrozenLake-v1.deterministic) with the slip switched on; FrozenLake-v1 itself is slippery now, with other settings.
TASKS = [("FrozenLake-v1.deterministic", '{"is_slippery": true}'), ("Blackjack-v1", None)]


def adopted_tables(run: Path) -> list[tuple[int, list[int]]]:
    """(iteration, table) of every adoption, in order; iteration 0 is the initial table."""
    out = []
    init = json.loads((run / "policies" / "iter_0001.json").read_text())
    for p in sorted((run / "policies").glob("iter_*.json")):
        meta = json.loads(p.read_text())
        m = meta.get("meta", {})
        if m.get("accepted"):
            out.append((int(m["iteration"]), meta["table"]))
    cfg = json.loads((run / "config.json").read_text())
    spec = cfg["env_spec"]
    n = int(np.prod([d["bins"] for d in spec["dims"]])) if spec["dims"] else int(spec["n_discrete_states"])
    return [(0, [int(spec["default_action"])] * n)] + out if init else out


def heldout_returns(run: Path, table: list[int]) -> np.ndarray:
    from llm_policy_gen.collect import Collector
    from llm_policy_gen.envs.spec import EnvSpec

    cfg = json.loads((run / "config.json").read_text())
    spec = EnvSpec.from_dict(cfg["env_spec"])
    first = int(cfg["seeds"]["heldout"])
    n = int(cfg["config"].get("heldout_episodes", 100))
    with Collector(spec) as c:
        return c.evaluate(np.asarray(table, dtype=np.int64), [first + j for j in range(n)]).returns


def count_drops(run: Path) -> tuple[int, int, list[str]]:
    seq = adopted_tables(run)
    rets = [heldout_returns(run, t) for _, t in seq]
    drops, notes = 0, []
    for k in range(1, len(seq)):
        d = rets[k] - rets[k - 1]
        se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
        if d.mean() < -2 * se and d.mean() < 0:
            drops += 1
            notes.append(f"iteration {seq[k][0]}: {rets[k - 1].mean():.3f} -> {rets[k].mean():.3f} (se {se:.3f})")
    return drops, len(seq) - 1, notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--out", default="/tmp/noise")
    ap.add_argument("--extra", default="", help="extra train options, e.g. '--confirm-episodes 0'")
    a = ap.parse_args()
    from bench_args import out_dir
    from bench_args import seeds as seeds_arg

    seeds = seeds_arg("noise", a.seeds)
    out = out_dir("noise", a.out)
    if seeds is None or out is None:
        return 2
    total = adoptions = 0
    for env_id, kwargs in TASKS:
        for seed in seeds:
            rid = f"s{seed}"
            argv = [sys.executable, "-m", "llm_policy_gen", "train", "--env", env_id, "--backend", "offline",
                    "--iterations", str(a.iterations), "--seed", str(seed), "--logs-dir", str(out), "--run-id", rid,
                    "--no-plots", "--no-progress", *a.extra.split()]
            if kwargs:
                argv += ["--env-kwargs", kwargs]
            run = out / gym_id(env_id) / rid
            if not (run / "summary.json").is_file():
                done = subprocess.run(argv, capture_output=True, text=True)
                if done.returncode != 0:  # the train's own one line (a bad --extra option, say)
                    lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
                    print(f"noise: {env_id} seed {seed}: {lines[-1]}", file=sys.stderr)
                    return done.returncode
            drops, n, notes = count_drops(run)
            total += drops
            adoptions += n
            print(f"{env_id} seed {seed}: {n} adoptions, {drops} lowered the held-out mean by > 2 SE "
                  + ("; ".join(notes)))
    print(f"total: {total} harmful adoptions of {adoptions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
