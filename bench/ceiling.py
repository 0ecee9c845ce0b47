"""What a spec's table can say: a known good controller on raw observations, and the same controller read through
the table (the spec's bins and action levels).

    python bench/ceiling.py [--tasks mountaincar,pendulum,...] [--episodes 100] [--bins N,N,...] [--levels N]

For a task that misses its goal this separates the two limits: if the controller read through the table misses the
goal too, the table's resolution is (close to) the limit; if it meets it, the search is. Each line is measured on the
held-out seeds of run seed 0 (50000...), so it sits next to the suite's figures.

**Read through the table**: the controller drives ``--fit-episodes`` episodes from the training range; each state of
the table takes the action the controller chose most often there (its own trajectories, not a uniform grid), and a
state it never visited takes the spec's prior rule there (the controller's action at the bin centre without a prior).
The controller at the bin centres is the other table shown (a dimension the table does not see is set to its mean
along the controller's trajectories). A table cannot beat the best table, so the
figure is a lower bound on what the discretisation allows (the majority is not the best action of an aliased state).

Controllers (textbook, not tuned on the held-out seeds):

* ``mountaincar``: the optimal policy of value iteration on a 451 x 451 grid of gymnasium's (deterministic) dynamics,
  with bilinear interpolation.
* ``mountaincarcontinuous``: force ``0.5 * sign(velocity)`` (a level of the table's 5).
* ``pendulum``: energy pumping ``u = 0.2 (E* - E) * omega`` (``E = omega^2 / 2 + 15 cos theta``, ``E* = 15``) and,
  once ``cos theta > 0.85``, the hold ``u = -(10 theta + 2 omega)``, clipped to [-2, 2].
* ``acrobot``: torque against the first link's angular velocity (``-1`` when it is positive, else ``+1``), the best
  of five one-line pumping rules on 20 training-range episodes.
* ``lunarlander``: gymnasium's own ``heuristic`` (``gymnasium.envs.box2d.lunar_lander``).
* ``reacher``: Jacobian-transpose PD on the fingertip error, ``tau = 50 J^T (target - tip) - 0.2 qdot``, clipped
  (gains picked from 8 pairs on 30 training-range episodes; the control cost punishes large torques).
* ``inverteddoublependulum``: LQR (``Q = diag(1, 100, 100, 1, 1, 1)`` over cart position, the two angles and their
  velocities, ``R = 1``) on the dynamics linearised about upright by finite differences of one environment step.

Not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from llm_policy_gen.collect import Collector
from llm_policy_gen.discretize import BoxActions, BoxDiscretizer
from llm_policy_gen.envs import get_spec, make_env
from llm_policy_gen.envs.spec import EnvSpec
from llm_policy_gen.keeper import SeedPlan

Controller = Callable[[np.ndarray], np.ndarray | int]


def mountaincar() -> Controller:
    nx = nv = 451
    xs, vs = np.linspace(-1.2, 0.6, nx), np.linspace(-0.07, 0.07, nv)
    x, v = np.meshgrid(xs, vs, indexing="ij")

    def step(x: np.ndarray, v: np.ndarray, a: int) -> tuple[np.ndarray, np.ndarray]:
        v = np.clip(v + (a - 1) * 0.001 - 0.0025 * np.cos(3 * x), -0.07, 0.07)
        x = np.clip(x + v, -1.2, 0.6)
        return x, np.where((x <= -1.2) & (v < 0), 0.0, v)

    def interp(t: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        fx, fv = (x + 1.2) / 1.8 * (nx - 1), (v + 0.07) / 0.14 * (nv - 1)
        i, j = np.clip(fx.astype(int), 0, nx - 2), np.clip(fv.astype(int), 0, nv - 2)
        a, b = fx - i, fv - j
        return (t[i, j] * (1 - a) * (1 - b) + t[i + 1, j] * a * (1 - b) + t[i, j + 1] * (1 - a) * b
                + t[i + 1, j + 1] * a * b)

    nxt = [step(x, v, a) for a in range(3)]
    t = np.zeros((nx, nv))
    for _ in range(3000):
        q = np.stack([np.where(x2 >= 0.5, -1.0, -1.0 + interp(t, x2, v2)) for x2, v2 in nxt])
        new = q.max(axis=0)
        if np.max(np.abs(new - t)) < 1e-6:
            break
        t = new
    policy = q.argmax(axis=0)

    def act(o: np.ndarray) -> int:
        i = int(np.clip(round((o[0] + 1.2) / 1.8 * (nx - 1)), 0, nx - 1))
        j = int(np.clip(round((o[1] + 0.07) / 0.14 * (nv - 1)), 0, nv - 1))
        return int(policy[i, j])
    return act


def pendulum(o: np.ndarray) -> np.ndarray:
    c, s, w = float(o[0]), float(o[1]), float(o[2])
    if c > 0.85:
        u = -(10 * np.arctan2(s, c) + 2 * w)
    else:
        u = 0.2 * (15 - (0.5 * w * w + 15 * c)) * w
    return np.array([np.clip(u, -2, 2)])


def mountaincarcontinuous(o: np.ndarray) -> np.ndarray:
    return np.array([0.5 * np.sign(float(o[1]))])


def acrobot(o: np.ndarray) -> int:
    return 0 if float(o[4]) > 0 else 2


def lunarlander(o: np.ndarray) -> int:
    from types import SimpleNamespace

    from gymnasium.envs.box2d.lunar_lander import heuristic
    return int(heuristic(SimpleNamespace(unwrapped=SimpleNamespace(continuous=False)), o))


def reacher(o: np.ndarray) -> np.ndarray:
    c1, c2, s1, s2 = o[0], o[1], o[2], o[3]
    c12, s12 = c1 * c2 - s1 * s2, s1 * c2 + c1 * s2
    l1, l2 = 0.1, 0.11
    jac = np.array([[-l1 * s1 - l2 * s12, -l2 * s12], [l1 * c1 + l2 * c12, l2 * c12]])
    err = -np.asarray(o[8:10])
    return np.clip(50 * jac.T @ err - 0.2 * np.asarray(o[6:8]), -1, 1)


def inverteddoublependulum() -> Controller:
    """LQR on the model linearised about upright by finite differences of one environment step."""
    import mujoco
    import scipy.linalg

    env = make_env(get_spec("InvertedDoublePendulum-v5"))
    env.reset(seed=0)
    u: Any = env.unwrapped
    model, data = u.model, u.data

    def step(z: np.ndarray, a: float) -> np.ndarray:
        data.qpos[:], data.qvel[:], data.ctrl[:] = z[:3], z[3:], a
        mujoco.mj_forward(model, data)
        for _ in range(u.frame_skip):
            mujoco.mj_step(model, data)
        return np.concatenate([data.qpos, data.qvel])

    eps, eye = 1e-5, np.eye(6)
    a_mat = np.stack([(step(eps * eye[i], 0.0) - step(-eps * eye[i], 0.0)) / (2 * eps) for i in range(6)], axis=1)
    b_mat = ((step(np.zeros(6), eps) - step(np.zeros(6), -eps)) / (2 * eps)).reshape(6, 1)
    env.close()
    q, r = np.diag([1.0, 100, 100, 1, 1, 1]), np.eye(1)
    p = scipy.linalg.solve_discrete_are(a_mat, b_mat, q, r)
    gain = np.linalg.solve(r + b_mat.T @ p @ b_mat, b_mat.T @ p @ a_mat)

    def act(o: np.ndarray) -> np.ndarray:
        z = np.array([o[0], np.arctan2(o[1], o[3]), np.arctan2(o[2], o[4]), o[5], o[6], o[7]])
        return np.clip(-gain @ z, -1, 1)
    return act


TASKS: dict[str, tuple[str, Callable[[], Controller]]] = {
    "mountaincar": ("MountainCar-v0", mountaincar),
    "mountaincarcontinuous": ("MountainCarContinuous-v0", lambda: mountaincarcontinuous),
    "pendulum": ("Pendulum-v1", lambda: pendulum),
    "acrobot": ("Acrobot-v1", lambda: acrobot),
    "lunarlander": ("LunarLander-v3", lambda: lunarlander),
    "reacher": ("Reacher-v5", lambda: reacher),
    "inverteddoublependulum": ("InvertedDoublePendulum-v5", inverteddoublependulum),
}


def action_index(spec: EnvSpec, a: np.ndarray | int) -> int:
    """The table's action for a controller's action: itself if discrete, else the nearest level per dimension."""
    acts = spec.action_discretizer()
    if not isinstance(acts, BoxActions):
        return int(np.asarray(a).reshape(-1)[0])
    lv = [int(np.abs(vals - float(x)).argmin()) for vals, x in zip(acts.values, np.ravel(a), strict=True)]
    return int(np.ravel_multi_index(tuple(lv), tuple(acts.levels)))


def run(env: Any, act: Callable[[np.ndarray], object], seed: int) -> float:
    o, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        o, r, term, trunc, _ = env.step(act(o))
        total, done = total + float(r), term or trunc
    return total


def ceiling(spec: EnvSpec, ctrl: Controller, episodes: int, fit_episodes: int) -> tuple[float, ...]:
    """Held-out means of the raw controller and of its two tables; the mean at the table's action levels (training
    seeds)."""
    obs = spec.observation_discretizer()
    assert isinstance(obs, BoxDiscretizer), "the tasks here have Box observations"
    values = spec.action_discretizer()
    plan = SeedPlan(0)
    heldout = [plan.heldout(j) for j in range(episodes)]
    env = make_env(spec)
    raw = float(np.mean([run(env, ctrl, s) for s in heldout]))
    counts = np.zeros((obs.n_states, spec.n_actions))
    seen: list[np.ndarray] = []

    def levelled(o: np.ndarray) -> object:
        """The controller at the table's action levels, counting each state's actions on the way."""
        a = action_index(spec, ctrl(o))
        seen.append(np.asarray(o, dtype=np.float64))
        counts[int(obs.encode(np.asarray(o)[None])[0]), a] += 1
        return values.to_env(np.array([a]))[0]
    quantised = [run(env, levelled, plan.train(k)) for k in range(fit_episodes)]
    full = np.tile(np.mean(seen, axis=0), (obs.n_states, 1))
    for j, d in enumerate(spec.dims):
        full[:, d.index] = obs.centers()[:, j]
    centre = np.array([action_index(spec, ctrl(row)) for row in full]).astype(np.int64)
    prior = spec.prior_table()
    fallback = centre if prior is None else prior
    majority = np.where(counts.sum(axis=1) > 0, counts.argmax(axis=1), fallback).astype(np.int64)
    env.close()
    with Collector(spec) as c:
        return raw, float(np.mean(quantised)), c.evaluate(centre, heldout).mean, c.evaluate(majority, heldout).mean


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--episodes", type=int, default=100, help="held-out episodes per figure")
    ap.add_argument("--fit-episodes", type=int, default=300, help="training-range episodes the table is read from")
    ap.add_argument("--bins", default="", help="override the spec's bins per dimension, e.g. 20,20")
    ap.add_argument("--levels", type=int, default=0, help="override the spec's action levels (Box actions)")
    ap.add_argument("--json", action="store_true", help="one JSON list of the figures instead of lines")
    args = ap.parse_args()

    def fail(message: str) -> int:
        print(f"ceiling: error: {message}", file=sys.stderr)
        return 2
    keys = args.tasks.split(",")
    unknown = [k for k in keys if k not in TASKS]
    if unknown:
        return fail(f"--tasks: unknown {', '.join(unknown)}; known: {', '.join(TASKS)}")
    try:
        bins = [int(b) for b in args.bins.split(",")] if args.bins else []
    except ValueError:
        return fail(f"--bins {args.bins!r}: comma-separated integers, e.g. 20,20")
    rows = []
    for key in keys:
        env_id, make = TASKS[key]
        spec = get_spec(env_id)
        if bins:
            if len(bins) != len(spec.dims) or min(bins) < 1:
                return fail(f"--bins {args.bins}: {env_id} needs {len(spec.dims)} counts of at least 1")
            spec = spec.with_overrides(dims=tuple(dataclasses.replace(d, bins=b)
                                                  for d, b in zip(spec.dims, bins, strict=True)))
        if args.levels:
            if args.levels < 2:
                return fail(f"--levels {args.levels}: at least 2")
            spec = spec.with_overrides(action_levels=args.levels)
        raw, levelled, centre, majority = ceiling(spec, make(), args.episodes, args.fit_episodes)
        shape = "x".join(str(d.bins) for d in spec.dims)
        rows.append({"task": key, "env_id": env_id, "bins": shape, "states": spec.n_states, "raw": raw,
                     "levelled": levelled, "centres": centre, "majority": majority})
        if args.json:
            continue
        print(f"{env_id:26s} bins {shape:>16s} ({spec.n_states:,} states), {spec.n_actions} actions: controller raw "
              f"{raw:9.2f} | at the table's action levels {levelled:9.2f} (training seeds) | read through the table: "
              f"at the bin centres {centre:9.2f}, by majority {majority:9.2f}")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
