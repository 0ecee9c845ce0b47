"""Peers beside the goal table: Stable-Baselines3 PPO, DQN and SAC (TRPO from sb3-contrib on request) with the RL
Baselines3 Zoo's tuned hyperparameters, at the interaction ``offline`` used.

    python bench/peers.py [--tasks cartpole,mountaincar,...] [--seeds 0-9] [--algos ppo,dqn,sac]
                          [--budgets steps,episodes,zoo] [--cpu-hours 3] [--curve-points 10] [--curve-episodes 10]
                          [--out ~/llm-policy-gen-bench/suite] [--workers N] [--list] [--plan]

Needs the ``peers`` extra (stable-baselines3, sb3-contrib, rl-zoo3, rliable; torch 2.13.0's CPU build).

**Hyperparameters** (``bench/zoo.py``): each run takes the zoo's entry for its environment and algorithm from the
YAML of the installed ``rl-zoo3`` package (its wrappers: ``VecNormalize``, frozen at evaluation; ``n_envs``;
``lin_X`` schedules; ``policy_kwargs`` parsed, never evaluated). A MuJoCo ``-v5`` task uses the zoo's ``-v4`` (or
``-v2``) entry, labelled so; a task without an entry (Taxi, CliffWalking, FrozenLake; DQN beyond CartPole,
MountainCar, LunarLander, Acrobot) runs at SB3's defaults labelled untuned. Every record names its source.

**Budgets**, one run each (``--budgets``): ``steps``: as many environment steps as ``offline`` took on that task and
seed (every counted episode: training, test, confirmation; ``env_steps_total`` in the suite's ``results.json``);
``episodes``: as many episodes as offline's, schedules running over offline's step count; ``zoo``: the zoo's
``n_timesteps``. A run stops at its budget exactly (a callback). One CPU budget for every run (``--cpu-hours``, a
planning figure, not a cap on a result): a run whose training, at the rate it has measured so far, would need more
is stopped, checkpointed (resumed only under a larger ``--cpu-hours``) and listed as out of reach with that
projection, beside the zoo's published figure where the installed package ships one (rl-zoo3 2.9 ships none, and
none is made up); it reports no held-out figure.

**Curves**: after every ``horizon / --curve-points`` steps the agent plays the first ``--curve-episodes`` of the
suite's held-out seeds deterministically (not counted as interaction; CPU apart); ``curve`` in the record holds
``[steps, episodes, mean]``. **Final**: the 100 held-out seeds of the suite's run of that seed (``seed * 1,000,000
+ 50,000 + j``), each the first episode of a new environment; training environments are seeded from the training
range (``seed * 1,000,000 + 100,000``).

**Resume**: each run lives in ``OUT/peers/ENV/ALGO_KIND_TARGET_sSEED`` and checkpoints there (SB3 ``save``, replay
buffer, environments, ``VecNormalize``, random generators) every ``--checkpoint-minutes`` of CPU, so an interrupted
invocation goes on where it stopped with the same result. Tasks that differ only in what a peer never sees (a
spec's table: LunarLander-v3.products) share a run when their budgets are equal. So do a seed's two
equal-interaction budgets when one would have stopped the other's finished run at the step where it stopped (the
same horizon and curve cadence; ``peer_train.stops_where``): every Pendulum-v1 episode lasts 200 steps, so its
equal-episodes cell is its equal-steps run, recorded with ``same_run_as`` and not trained twice.

**Plan** (``--plan``, ``bench/peers_plan.py``): trains nothing; for the cells asked, what is done, what is left,
and the CPU hours it projects at the rates measured here, written to ``peers_plan.md``.

Written to ``OUT``: ``peers.json`` (one record per task, algorithm, seed and budget), ``peers.md`` (every cell,
with source, steps, episodes, budget reached, CPU seconds, and the cells out of reach) and the peer columns of
``suite.md``. Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from concurrent.futures import as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import peers_plan
import results_file
import suite
import suite_curves
import suite_goals
import suite_peers
from bench_args import out_dir, read_json, run_main, workers_ok
from bench_pool import worker_pool

ALGOS = ("ppo", "dqn", "sac", "trpo")
DEFAULT_ALGOS = "ppo,dqn,sac"
KINDS = ("steps", "episodes", "zoo")
KIND_LABEL = suite_curves.PEER_KIND_LABEL
HELDOUT_EPISODES = 100
"""As the suite's runs (``heldout_episodes``' default)."""
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def algos_for(discrete_actions: bool, wanted: list[str]) -> list[str]:
    """PPO and TRPO everywhere; DQN for discrete actions, SAC for continuous ones."""
    fits = {"ppo", "trpo", "dqn" if discrete_actions else "sac"}
    return [a for a in wanted if a in fits]


def budget_for(kind: str, hyper: Any, offline: tuple[int, int] | None) -> Any:
    """The run's :class:`peer_train.Budget`, or a string saying why the cell has none."""
    from peer_train import Budget

    if kind == "zoo":
        if hyper.n_timesteps is None:
            return "no zoo budget (untuned)"
        return Budget("zoo", hyper.n_timesteps, hyper.n_timesteps)
    if offline is None:
        return "no finished offline run of this task and seed in the suite's results.json"
    steps, episodes = offline
    return Budget("steps", steps, steps) if kind == "steps" else Budget("episodes", episodes, steps)


def setup_id(env_id: str) -> str:
    """The environment a peer sees (gymnasium id, make arguments, time limit, reward wrappers), as a folder name;
    two tasks that differ only in their table share it."""
    from llm_policy_gen.envs import get_spec

    spec = get_spec(env_id)
    setup = json.dumps([spec.env_id, spec.kwargs, spec.max_episode_steps, list(spec.reward_wrappers)],
                       sort_keys=True)
    return f"{spec.env_id}_{hashlib.sha256(setup.encode()).hexdigest()[:6]}"


def make_one(env_id: str) -> Any:
    """The suite's environment for ``env_id`` (spec kwargs, time limit, reward wrappers), one-hot if its
    observation is one integer."""
    import gymnasium as gym

    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.envs.make import make_env

    env = make_env(get_spec(env_id))
    if isinstance(env.observation_space, gym.spaces.Discrete):
        env = gym.wrappers.FlattenObservation(env)
    return env


class EnvFactory:
    """A picklable ``make_one`` for one task (the DummyVecEnv and its checkpoint keep it)."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self) -> Any:
        return make_one(self.env_id)


def run_dir_for(out: Path, task: str, algo: str, kind: str, budget: Any, seed: int) -> Path:
    return out / "peers" / setup_id(suite_goals.BY_KEY[task].env_id) / f"{algo}_{kind}{budget.target}_s{seed}"


def curve_every(budget: Any, opts: dict[str, Any]) -> int:
    """Steps between curve points: the budget's horizon over ``--curve-points``."""
    return max(1, math.ceil(budget.horizon / opts["curve_points"]))


def run_one(task: str, algo: str, seed: int, kind: str, out: Path, offline: tuple[int, int] | None,
            opts: dict[str, Any]) -> dict[str, Any]:
    """Train (or resume, or reuse) and evaluate one peer; returns its record."""
    os.environ.update(ONE_THREAD)
    goal = suite_goals.BY_KEY[task]
    record: dict[str, Any] = {"task": task, "env_id": goal.env_id, "algo": algo, "seed": seed, "kind": kind}
    try:
        import peer_train
        import torch
        import zoo

        from llm_policy_gen.envs import get_spec
        from llm_policy_gen.keeper import SeedPlan

        torch.set_num_threads(1)
        hyper = zoo.hyperparameters(algo, get_spec(goal.env_id).env_id)
        record.update(hyperparameters=hyper.source, tuned=hyper.tuned, zoo_entry=hyper.raw or None)
        budget = budget_for(kind, hyper, offline)
        if isinstance(budget, str):
            return {**record, "not_run": budget}
        run_dir = run_dir_for(out, task, algo, kind, budget, seed)
        record["run_dir"] = str(run_dir)
        done = run_dir / "result.json"
        if done.is_file():
            return {**record, **json.loads(done.read_text()), "reused": True}
        every = curve_every(budget, opts)
        twin = same_run(out, task, algo, seed, budget, hyper, offline, every, opts["curve_episodes"])
        if twin is not None:
            return {**record, **twin}
        plan = SeedPlan(seed)
        fields = peer_train.train(run_dir, algo, hyper, EnvFactory(goal.env_id), budget, plan.train(0),
                                  [plan.heldout(j) for j in range(opts.get("heldout_episodes", HELDOUT_EPISODES))],
                                  opts["curve_episodes"], every, opts["cpu_hours"] * 3600,
                                  opts["checkpoint_minutes"] * 60, opts.get("stop_after_segments"))
        if fields["reached"]:
            done.write_text(json.dumps(fields))
        if "out_of_reach" in fields:
            fields["cpu_hours"] = opts["cpu_hours"]  # tried again only under a larger --cpu-hours
            ref = zoo.benchmark_reference(algo, get_spec(goal.env_id).env_id)
            fields["reference"] = ref or f"none: the installed rl-zoo3 {zoo.zoo_version()} ships no benchmark table"
        return {**record, **fields}
    except Exception as exc:  # a failed run is a row with its error
        return {**record, "error": f"{type(exc).__name__}: {exc}"[:300]}


def same_run(out: Path, task: str, algo: str, seed: int, budget: Any, hyper: Any, offline: tuple[int, int] | None,
             eval_every: int, curve_episodes: int) -> dict[str, Any] | None:
    """The finished run of the other equal-interaction budget of this task, algorithm and seed, when ``budget``
    would have stopped it at the step where it stopped (:func:`peer_train.stops_where`): that run's fields under this
    cell's budget, with ``same_run_as`` naming its folder; else None. Every Pendulum-v1 episode lasts 200 steps, so
    its equal-episodes SAC cell is its equal-steps run, not a second one trained to the same step."""
    import peer_train

    if budget.kind not in ("steps", "episodes"):
        return None
    other = budget_for("episodes" if budget.kind == "steps" else "steps", hyper, offline)
    if isinstance(other, str):
        return None
    result = run_dir_for(out, task, algo, other.kind, other, seed) / "result.json"
    if not result.is_file():
        return None
    fields = json.loads(result.read_text())
    if not peer_train.stops_where(fields, budget, eval_every, curve_episodes):
        return None
    return {**fields, "target": budget.target, "run_dir": str(result.parent), "same_run_as": str(result.parent),
            "reused": True}


def run_group(jobs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """:func:`run_one` for jobs that may share a run (the same environment, algorithm and seed: a task that differs
    only in its table, or the other equal-interaction budget), one after the other in one worker: the later ones
    reuse the first's finished run instead of racing it."""
    return [run_one(*job) for job in jobs]


def cells(records: list[dict[str, Any]]) -> list[suite_peers.PeerCell]:
    """The suite's peer columns: per task, algorithm and budget kind, the seeds' held-out means (None: the run
    failed or did not reach its budget), how many did not reach it, and the hyperparameter source."""
    out: list[suite_peers.PeerCell] = []
    for goal in suite.GOALS:
        for algo in ALGOS:
            for kind in KINDS:
                rs = sorted((r for r in records if r["task"] == goal.key and r["algo"] == algo
                             and r.get("kind") == kind and "not_run" not in r), key=lambda r: r["seed"])
                if not rs:
                    continue
                errors = [r["error"] for r in rs if "error" in r]
                sources = sorted({r["hyperparameters"] for r in rs if "hyperparameters" in r})
                out.append(suite_peers.PeerCell(
                    task=goal.key, column=suite_curves.peer_method({"algo": algo, "kind": kind}),
                    values=tuple(r.get("heldout") for r in rs),
                    unreached=sum("error" not in r and not r.get("reached") for r in rs),
                    error=errors[0] if len(errors) == len(rs) else None, source="; ".join(sources)))
    return out


def reached(record: dict[str, Any]) -> str:
    """``peers.md``'s "reached" cell: yes or no, and whose run it is when it is the other budget's."""
    if not record.get("reached"):
        return "no"
    if not record.get("same_run_as"):
        return "yes"
    return f"yes (the {'steps' if record['kind'] == 'episodes' else 'episodes'} run)"


def details(records: list[dict[str, Any]]) -> str:
    """``peers.md``: every run's figures, then the cells only a reference can fill."""
    lines = ["# Peers (bench/peers.py)", "", "One row per task, algorithm, budget and seed: held-out mean over 100 "
             "episodes, steps and episodes trained, whether the budget was reached (\"the steps run\": the "
             "equal-steps run stopped where this budget would have, so it is this cell's run too), training CPU "
             "seconds (curve evaluations apart), the hyperparameter source.", "",
             "| task | algo | budget | seed | held-out | steps | episodes | reached | CPU s | source |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    key = lambda r: (r["task"], r["algo"], KINDS.index(r.get("kind", "steps")), r["seed"])  # noqa: E731
    for r in sorted(records, key=key):
        held = r.get("error") or r.get("not_run") or (f"{r['heldout']:,.2f}" if "heldout" in r else "-")
        target = f"{r['kind']} {r['target']:,}" if "target" in r else r.get("kind", "")
        lines.append(f"| {r['task']} | {r['algo'].upper()} | {target} | {r['seed']} | {held} | "
                     f"{r.get('steps', 0):,} | {r.get('episodes', 0):,} | {reached(r)} | "
                     f"{r.get('cpu_s', 0):,.0f} | {r.get('hyperparameters', '')} |")
    far = [r for r in sorted(records, key=key) if "out_of_reach" in r]
    lines += ["", "## Out of reach on these cores", ""]
    lines += [f"- {r['task']} {r['algo'].upper()} {r['kind']} {r['target']:,}, seed {r['seed']}: "
              f"{r['out_of_reach']}. Reference: {r['reference']}." for r in far] or ["None."]
    return "\n".join(lines) + "\n"


def plan_cell(task: str, algo: str, seed: int, kind: str, out: Path, offline: tuple[int, int] | None,
              done: dict[str, Any] | None, stale: bool, hyper: Any, opts: dict[str, Any]) -> peers_plan.Cell:
    """What is there of one cell, for ``--plan``: its budget's step horizon (``hyper``: the task's
    :func:`zoo.hyperparameters` for ``algo``), its state (done also when the other equal-interaction budget's finished
    run is its run: :func:`same_run`), an interrupted run's progress."""
    budget = budget_for(kind, hyper, offline)
    if isinstance(budget, str):
        return peers_plan.Cell(task, algo, kind, seed, None, f"not run: {budget}")
    if done is not None and done.get("reached"):
        return peers_plan.Cell(task, algo, kind, seed, budget.horizon, "done", budget.horizon)
    if done is not None and "out_of_reach" in done:
        return peers_plan.Cell(task, algo, kind, seed, budget.horizon, "out of reach")
    if same_run(out, task, algo, seed, budget, hyper, offline, curve_every(budget, opts),
                opts["curve_episodes"]) is not None:
        return peers_plan.Cell(task, algo, kind, seed, budget.horizon, "done", budget.horizon)
    steps, cpu = peers_plan.progress(run_dir_for(out, task, algo, kind, budget, seed))
    status = "stale" if stale and not steps else "partly run" if steps else "to run"
    return peers_plan.Cell(task, algo, kind, seed, budget.horizon, status, steps, cpu)


def plan_hyperparameters(algo: str, env_id: str) -> Any:
    import zoo

    from llm_policy_gen.envs import get_spec

    return zoo.hyperparameters(algo, get_spec(env_id).env_id)


def _discrete(env_id: str) -> bool:
    import gymnasium as gym

    env = make_one(env_id)
    try:
        return isinstance(env.action_space, gym.spaces.Discrete)
    finally:
        env.close()


def record_key(record: dict[str, Any]) -> tuple[str, str, int, str]:
    """A peer record's identity: its task, algorithm, seed and budget kind."""
    return record["task"], record["algo"], record["seed"], record.get("kind", "episodes")


def save_records(path: Path, mine: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put this invocation's records into ``path`` (``peers.json``) and return all of them: only these cells are
    replaced (:func:`results_file.merge_save`), so two ``peers.py`` runs on one folder lose nothing of each other's."""
    return results_file.merge_save(path, mine, record_key,
                                   order=lambda r: (r["task"], r["algo"], r["seed"], r.get("kind", "")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(suite_goals.BY_KEY), help="comma-separated task keys (see --list)")
    ap.add_argument("--seeds", default=None, help="e.g. 0-2; default: each task's own (0-9, 0-4 for the long ones)")
    ap.add_argument("--algos", default=DEFAULT_ALGOS, help=f"of {','.join(ALGOS)} (each only where it applies)")
    ap.add_argument("--budgets", default=",".join(KINDS), help="of steps,episodes,zoo")
    ap.add_argument("--cpu-hours", type=float, default=3.0, help="CPU budget per run (planning; see above)")
    ap.add_argument("--curve-points", type=int, default=10, help="held-out curve points per run")
    ap.add_argument("--curve-episodes", type=int, default=10, help="held-out episodes per curve point")
    ap.add_argument("--checkpoint-minutes", type=float, default=10.0, help="CPU minutes between checkpoints")
    ap.add_argument("--out", default=str(suite.DEFAULT_OUT), help="the suite's results folder")
    ap.add_argument("--workers", type=int, default=1, help="runs at a time (each on one core)")
    ap.add_argument("--list", action="store_true", help="list the tasks and exit")
    ap.add_argument("--plan", action="store_true",
                    help="train nothing: project the CPU hours the asked cells still need (peers_plan.md)")
    args = ap.parse_args(argv)
    if args.list:
        suite_goals.list_tasks()
        return 0
    wanted, kinds = args.algos.split(","), args.budgets.split(",")
    bad = [a for a in wanted if a not in ALGOS] + [k for k in kinds if k not in KINDS]
    if bad or args.cpu_hours <= 0 or args.curve_points < 1 or args.curve_episodes < 1:
        what = f"unknown algorithm or budget {bad[0]!r}" if bad else "--cpu-hours, --curve-points and " \
            "--curve-episodes must be positive"
        print(f"peers: {what}; algorithms: {', '.join(ALGOS)}; budgets: {', '.join(KINDS)}", file=sys.stderr)
        return 2
    parsed = suite_goals.tasks_and_seeds("peers", args.tasks, args.seeds or "0")
    if parsed is None:
        return 2
    tasks, given_seeds = parsed
    from importlib.util import find_spec

    if find_spec("rl_zoo3") is None or find_spec("stable_baselines3") is None:
        print("peers: the `peers` extra is not installed (stable-baselines3, rl-zoo3); `make peers` installs it",
              file=sys.stderr)
        return 2
    out = out_dir("peers", args.out)
    if out is None or not workers_ok("peers", args.workers):
        return 2
    out.mkdir(parents=True, exist_ok=True)
    peers_file = out / "peers.json"
    records: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    if peers_file.is_file():
        for r in read_json(peers_file, []):
            records[(r["task"], r["algo"], r["seed"], r.get("kind", "episodes"))] = r
    suite_records = suite.read_results(out)
    opts = {"curve_points": args.curve_points, "curve_episodes": args.curve_episodes, "cpu_hours": args.cpu_hours,
            "checkpoint_minutes": args.checkpoint_minutes}
    jobs, plan = [], []
    for task in tasks:
        goal = suite_goals.BY_KEY[task]
        for algo in algos_for(_discrete(goal.env_id), wanted):
            hyper = plan_hyperparameters(algo, goal.env_id) if args.plan else None  # the zoo's YAML read once
            for seed in (given_seeds if args.seeds else goal.seeds):
                for kind in kinds:
                    done = records.get((task, algo, seed, kind))
                    offline = suite_peers.offline_budget(suite_records, task, seed)
                    stale = done is not None and suite_peers.stale(done, kind, offline)
                    if stale:
                        done = None
                    out_of_reach = "out_of_reach" in done if done else False
                    if done is None or not (done.get("reached") or "not_run" in done or (
                            out_of_reach and done.get("cpu_hours", 0) >= args.cpu_hours)):
                        jobs.append((task, algo, seed, kind, out, offline, opts))
                    if args.plan:
                        plan.append(plan_cell(task, algo, seed, kind, out, offline, done, stale, hyper, opts))
    if args.plan:
        text = peers_plan.markdown(plan, peers_plan.rates(list(records.values())), args.cpu_hours)
        (out / "peers_plan.md").write_text(text)
        print(text, end="")
        return 0
    os.environ.update(ONE_THREAD)
    # spawn, one run a process: each run's CPU time is its own.
    with worker_pool(args.workers, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for job in jobs:
            # the two equal-interaction budgets of a seed in one group, steps first: the later may be the same run
            equal = "zoo" if job[3] == "zoo" else "equal"
            groups.setdefault((setup_id(suite_goals.BY_KEY[job[0]].env_id), job[1], job[2], equal), []).append(job)
        for group in groups.values():
            group.sort(key=lambda job: KINDS.index(job[3]))
        futures = [pool.submit(run_group, group) for group in groups.values()]
        mine: list[dict[str, Any]] = []
        for fut in as_completed(futures):
            for rec in fut.result():
                done_key = (rec["task"], rec["algo"], rec["seed"], rec["kind"])
                records[done_key] = rec
                mine.append(rec)
                shown = rec.get("error") or rec.get("not_run") or rec.get("out_of_reach") or (
                    f"held-out {rec['heldout']:,.1f} after {rec['steps']:,} steps ({rec['episodes']:,} episodes), "
                    f"{rec['cpu_s']:,.0f} CPU s; {rec['hyperparameters']}")
                print(f"{done_key[0]} {done_key[1]} seed {done_key[2]} {done_key[3]}: {shown}", flush=True)
            save_records(peers_file, mine)
    all_records = save_records(peers_file, mine)
    (out / "peers.md").write_text(details(all_records))
    page = suite.write_report(out)  # its peer columns come from peers.json, stale cells left out
    print(f"wrote {page} (from {out / 'results.json'}), {out / 'peers.md'} and {peers_file}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main("peers", main))
