"""Reference scores per task and seed for the goal table, measured once and kept in the suite's folder.

* ``random_policy.json``: the uniform random policy's mean return on each run seed's 100 held-out seeds
  (:mod:`llm_policy_gen.sweep.random_baseline`; not the ``random`` backend, a random search), the zero of the normalised
  score ``(return - R) / (goal - R)`` (:func:`llm_policy_gen.plotting.stats.normalized`).
* ``priors.json``: the spec's prior scored with **zero episodes**: the table its prior rule gives (or, for a spec
  without a prior, the table every run starts from, the default action everywhere) on the same held-out seeds. It is
  what a run knows before it has used a single episode (issue 32 item 4).

Both are deterministic (seeded episodes), so a value once measured is kept; a missing task or seed is measured when
asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from bench_args import read_json

HELDOUT_EPISODES = 100
"""As the suite's runs (``heldout_episodes``' default) and the peers' final evaluation."""
RANDOM_FILE = "random_policy.json"
PRIORS_FILE = "priors.json"


def prior_kind(env_id: str) -> str:
    """What the zero-episode row of ``env_id`` scores: its spec's prior rule, or the default-action table."""
    from llm_policy_gen.envs import get_spec

    spec = get_spec(env_id)
    if spec.prior_table() is not None:
        return "prior rule"
    return f"no prior: default action {spec.default_action} everywhere"


def _prior_means(env_id: str, seeds: list[int]) -> dict[int, float]:
    from llm_policy_gen.collect import Collector
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.sweep.random_baseline import heldout_seeds

    spec = get_spec(env_id)
    table = spec.prior_table()
    table = spec.default_table() if table is None else table
    with Collector(spec, workers=1) as c:
        return {s: float(np.mean(c.evaluate(table, heldout_seeds(s, HELDOUT_EPISODES)).returns)) for s in seeds}


def _random_means(env_id: str, seeds: list[int]) -> dict[int, float]:
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.sweep.random_baseline import heldout_random_means

    return heldout_random_means(get_spec(env_id), seeds, HELDOUT_EPISODES)


def write_means(path: Path, data: dict[str, Any]) -> None:
    """Write a held-out means file (``random_policy.json``, ``priors.json``) whole, through a temporary file, so that a
    reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)


def _kept(out: Path, name: str, wanted: Iterable[tuple[str, str, int]],
          measure: Callable[[str, list[int]], dict[int, float]], extra: Callable[[str], dict[str, Any]]
          ) -> dict[str, dict[int, float]]:
    """``{task: {seed: value}}`` for ``wanted`` (task, env id, seed), from ``out/name`` and measured where missing
    (then written back)."""
    path = out / name
    data: dict[str, Any] = read_json(path, {})
    tasks: dict[str, Any] = data.setdefault("tasks", {})
    missing: dict[tuple[str, str], list[int]] = {}
    for task, env_id, seed in wanted:
        entry = tasks.get(task)
        if entry is None or entry.get("env_id") != env_id:
            entry = tasks[task] = {"env_id": env_id, **extra(env_id), "by_seed": {}}
        if str(seed) not in entry["by_seed"]:
            missing.setdefault((task, env_id), []).append(seed)
    for (task, env_id), seeds in missing.items():
        got = measure(env_id, sorted(set(seeds)))
        tasks[task]["by_seed"].update({str(s): v for s, v in got.items()})
    if missing or not path.is_file():
        data["heldout_episodes"] = HELDOUT_EPISODES
        write_means(path, data)
    return {t: {int(s): float(v) for s, v in e["by_seed"].items()} for t, e in tasks.items()}


def random_policy(out: Path, wanted: Iterable[tuple[str, str, int]]) -> dict[str, dict[int, float]]:
    """The uniform random policy's held-out mean per task and seed (``random_policy.json``)."""
    from llm_policy_gen.sweep.random_baseline import POLICY

    return _kept(out, RANDOM_FILE, wanted, _random_means, lambda _e: {"policy": POLICY})


def priors(out: Path, wanted: Iterable[tuple[str, str, int]]) -> dict[str, dict[int, float]]:
    """The prior's held-out mean with zero episodes per task and seed (``priors.json``)."""
    return _kept(out, PRIORS_FILE, wanted, _prior_means, lambda e: {"table": prior_kind(e)})
