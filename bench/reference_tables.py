"""Reference tables on the held-out seeds a run reports on: a uniformly random table and the do-nothing table.

    python bench/reference_tables.py --env Hopper-v5 [--episodes 100] [--seed 50000] [--random-seed 0]

The do-nothing table is the spec's ``default_action`` everywhere (zero torque for Box actions, the first action
for discrete ones). ``--seed 50000`` is the first held-out seed of a run with ``--seed 0`` (see keeper.seed_ranges),
so the figures sit next to that run's ``best_eval_mean``.
"""

from __future__ import annotations

import argparse

import numpy as np

from llm_policy_gen.collect import Collector
from llm_policy_gen.envs import get_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=50_000)
    ap.add_argument("--random-seed", type=int, default=0)
    args = ap.parse_args()
    spec = get_spec(args.env)
    rng = np.random.default_rng(args.random_seed)
    tables = {
        "random table": rng.integers(0, spec.n_actions, spec.n_states),
        "do-nothing table": spec.default_table(),
    }
    prior = spec.prior_table()
    if prior is not None:
        tables["prior rule table"] = prior
    seeds = [args.seed + j for j in range(args.episodes)]
    with Collector(spec) as c:
        for name, table in tables.items():
            r = c.evaluate(table, seeds)
            print(f"{args.env} {name:<17}: mean {r.mean:9.2f} +- {np.std(r.returns):7.2f} over {args.episodes} "
                  f"episodes from seed {args.seed}")


if __name__ == "__main__":
    main()
