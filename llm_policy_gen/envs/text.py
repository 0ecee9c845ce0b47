"""The task text of a spec under the keyword arguments actually used.

A shipped spec's description, reward text and hints file are written for its own ``[kwargs]`` (FrozenLake-v1: the
4x4 map, not slippery). When ``--env-kwargs`` changes what that text describes, the text must follow:

* an environment with a renderer here (:data:`RENDERERS`) gets its text rendered from the environment itself
  (FrozenLake: the map read from ``env.unwrapped.desc``, the slip and rewards from its transition table ``P``);
* a spec whose declared kwargs change and which has no renderer is refused (its text would contradict the task);
* any other spec keeps its text, with a note (its kwargs were never part of what the text describes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import SpecError
from .spec import EnvSpec

__all__ = ["RENDERERS", "describe_kwargs", "lake_text"]

_MISSING = object()
_ACTIONS = ("left", "down", "right", "up")


def _num(x: float) -> str:
    return f"{x:g}" if abs(x - round(x, 4)) < 1e-9 else f"{x:.3f}"


def _states(cells: list[int]) -> str:
    if len(cells) <= 1:
        return "".join(str(c) for c in cells)
    return ", ".join(str(c) for c in cells[:-1]) + f" and {cells[-1]}"


def lake_text(env: Any, max_steps: int | None) -> tuple[str, str, str, str]:
    """(title, description, reward, hints) of a FrozenLake environment, read from ``env.unwrapped``: its map
    ``desc`` and its transition table ``P`` (which moves slip, with what probability, and the rewards of each kind
    of cell)."""
    raw = env.unwrapped
    desc, table = getattr(raw, "desc", None), getattr(raw, "P", None)
    if desc is None or not isinstance(table, dict):
        raise SpecError(f"{type(raw).__name__} has no map (desc) and transition table (P) to describe")
    rows = ["".join(c.decode() if isinstance(c, bytes) else str(c) for c in row) for row in desc]
    n_rows, n_cols = len(rows), len(rows[0])
    cells = "".join(rows)
    holes = [i for i, c in enumerate(cells) if c == "H"]
    goals = [i for i, c in enumerate(cells) if c == "G"]
    starts = [i for i, c in enumerate(cells) if c == "S"]
    rewards: dict[str, float] = {}
    slip: tuple[float, float] | None = None
    for s, by_action in table.items():
        if cells[s] in "GH":
            continue
        for outcomes in by_action.values():
            for _, nxt, r, _ in outcomes:
                rewards.setdefault(cells[nxt], float(r))
            if len(outcomes) == 3 and slip is None:
                slip = (float(outcomes[1][0]), float(outcomes[0][0]))
    goal_r, hole_r, ice_r = rewards.get("G", 1.0), rewards.get("H", 0.0), rewards.get("F", rewards.get("S", 0.0))
    start = f"the start S (state {_states(starts)})" if len(starts) == 1 else f"a start S (states {_states(starts)})"
    goal = "the goal G" if len(goals) == 1 else "a goal G"
    slip_text = ("The ice is not slippery: every action moves exactly one cell (or stays at the lake's edge)."
                 if slip is None else
                 f"The ice is slippery: a move goes in the chosen direction with probability {_num(slip[0])} and to "
                 f"each of the two perpendicular directions with probability {_num(slip[1])}; it never goes "
                 "backwards. Moving into the lake's edge keeps the agent in place.")
    article = "an" if str(n_rows).startswith(("8", "11", "18")) else "a"
    description = (f"The agent walks on {article} {n_rows}x{n_cols} frozen lake from {start} to {goal} (state "
                   f"{_states(goals)}) without falling into a hole H. Map rows: {' / '.join(rows)}. {slip_text}")
    steps = f"after {max_steps} steps" if max_steps else "at the step limit"
    extra = "" if ice_r == 0 else f" {_num(ice_r)} for each step onto frozen ice;"
    reward = (f"{_num(goal_r)} for reaching the goal, {_num(hole_r)} for falling into a hole;{extra} the episode ends "
              f"in a hole, at the goal, or {steps}." + (" Success rate = mean return." if (goal_r, hole_r, ice_r)
                                                         == (1.0, 0.0, 0.0) else ""))
    where = ("The map has no holes." if not holes else f"A hole at state {holes[0]} ends" if len(holes) == 1
             else f"Holes at states {_states(holes)} end")
    where += f" the episode with reward {_num(hole_r)}." if holes else ""
    goal_cells = ", ".join(f"state {g} (row {g // n_cols}, col {g % n_cols})" for g in goals)
    hints = [f"- {slip_text}", f"- {where} The goal is {goal_cells}." if goals else f"- {where}"]
    if slip is not None:
        hints.append("- Because of the slip, a path next to a hole risks falling in even when the chosen direction is "
                     "safe; a direction whose two side-slips are also safe cannot lose.")
    hints.append("- Actions in states never visited by a good path do not matter for the return.")
    title = f"FrozenLake {n_rows}x{n_cols}" + (", slippery" if slip is not None else "")
    return title, description, reward, "\n".join(hints)


RENDERERS: dict[str, Callable[[Any, int | None], tuple[str, str, str, str]]] = {"FrozenLake-v1": lake_text}
"""Environments whose task text can be rendered from the environment: gymnasium id -> function of the made
environment and the step limit, returning (title, description, reward, hints)."""


def describe_kwargs(original: EnvSpec, spec: EnvSpec) -> EnvSpec:
    """``spec`` (``original`` with other keyword arguments) with task text that describes those arguments (see the
    module docstring)."""
    changed = sorted(k for k, v in spec.kwargs.items() if original.kwargs.get(k, _MISSING) != v)
    if not changed:
        return spec
    render = RENDERERS.get(spec.env_id)
    if render is None:
        declared = [k for k in changed if k in original.kwargs]
        if declared:
            raise SpecError(f"{original.name}: its task text is written for {declared[0]}="
                            f"{original.kwargs[declared[0]]!r}, not {spec.kwargs[declared[0]]!r}, and cannot be "
                            "rendered from the environment; use a spec variant (see `envs`) or leave it out")
        return spec
    from .generic import make_checked

    env = make_checked(spec.env_id, spec.kwargs, disable_env_checker=True)
    try:
        title, description, reward, hints = render(env, spec.max_episode_steps)
    finally:
        env.close()
    note = f"task text and hints rendered from the environment for env kwargs {', '.join(changed)}"
    return spec.with_overrides(title=title, description=description, reward=reward, hints="", hints_text=hints,
                               notes=(*spec.notes, note))
