"""A suite's settings grids and its choice rule, as data (``[[grid]]`` and ``[choice]`` of a suite TOML).

::

    [[grid]]
    search = "coordinate"               # each setting alone at half and double the task's value, around its base
    entry = "offline"                   # the method every point runs (a method entry without a label)
    base = "today"                      # the label of the base point: the task's settings unchanged
    vary = ["candidates", "train_episodes"]

    [[grid]]
    search = "product"                  # every combination of the values, the same on every task
    entry = "@q-learning"
    values = { q_alpha = [0.1, 0.5], q_epsilon_start = [1.0, 0.1] }
    names = { q_alpha = "alpha", q_epsilon_start = "eps" }    # optional: the labels' words (alpha0.1-eps1.0)
    label = "q"                         # optional: the labels' prefix (q.alpha0.1-eps1.0)

    [choice]
    base = "today"                      # optional: the point the others must beat beyond noise
    stop = true                         # a change stops once it has missed the goal on more seeds than the base

A grid expands into methods with stable labels (:func:`grid_methods`): a coordinate search into ``BASE`` and
``SETTING-half`` / ``SETTING-double`` (the task's value floor-halved, at least 1, and doubled: the point is the
task's own, :func:`moved`), a product into ``[LABEL.]NAME VALUE-NAME VALUE...`` (``alpha0.1-eps1.0``; the entry's
options, the same on every task). A point that
is not a valid setting on a task (the base's value again, ``test_max`` below ``test_start``) is listed there with
why, not run (:func:`not_a_point`). The choice rule (:mod:`.choice`) reads the records on the suite's seeds only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..errors import UserError
from .store import SuiteRecord

__all__ = ["Choice", "SEARCHES", "grid_methods", "parse_choice", "moved", "base_values", "not_a_point", "judged",
           "missed"]

SEARCHES = ("coordinate", "product")
MOVES = {"half": lambda v: max(1, v // 2), "double": lambda v: v * 2}
"""How a coordinate point moves the task's value of a setting."""


@dataclass(frozen=True)
class Choice:
    """The choice rule: most seeds at the goal (on each seed's judged value), then the highest IQM of the judged
    values; with a ``base``, a point is chosen only when it beats the base beyond the seeds' noise (more seeds at the
    goal, or as many with its IQM's 95 % interval wholly above the base's IQM), else the base stays."""

    base: str = ""
    stop: bool = False
    """A change's next seed runs only while it has missed the goal on no more seeds than the base missed in all."""


def parse_choice(data: object, where: str) -> Choice | None:
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {"base", "stop"}:
        raise UserError(f"bad {where} [choice]: accepted keys base (a label) and stop (true/false)")
    choice = Choice(base=str(data.get("base", "")), stop=bool(data.get("stop", False)))
    if choice.stop and not choice.base:
        raise UserError(f"bad {where} [choice]: stop needs a base to stop against")
    return choice


def _label_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def grid_methods(grid: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The method tables (as ``[[method]]`` gives them, plus ``moves``) a ``[[grid]]`` table expands into."""
    search, entry = grid.get("search"), grid.get("entry")
    if search not in SEARCHES or not isinstance(entry, str) or "=" in entry.split("[", 1)[0]:
        raise UserError(f"bad {where}: a grid needs search = {' or '.join(SEARCHES)} and an entry without a label")
    budget = str(grid.get("budget", "task"))
    common = {"budget": budget, "iterations": int(grid.get("iterations", 0))}
    head, _, opts = entry.partition("[")
    if search == "coordinate":
        vary = grid.get("vary")
        if not isinstance(vary, list) or not vary or not all(isinstance(v, str) for v in vary):
            raise UserError(f"bad {where}: a coordinate grid needs vary = [\"SETTING\", ...]")
        from ..config import TrainConfig

        fields = TrainConfig.model_fields
        odd = [k for k in vary if k not in fields or type(fields[k].default) is not int]
        if odd:
            raise UserError(f"bad {where}: vary {odd[0]!r} is not an integer setting of train (a coordinate grid "
                            "halves and doubles each)")
        base = str(grid.get("base", "today"))
        out = [{"label": base, "entry": f"{base}={entry}", **common, "note": "the grid's base: the task's settings"}]
        for key, how in itertools.product(vary, MOVES):
            out.append({"label": f"{key}-{how}", "entry": f"{key}-{how}={entry}", **common, "moves": ((key, how),),
                        "note": f"the base with {key} at {how} the task's value"})
        return out
    values = grid.get("values")
    if not isinstance(values, dict) or not values or not all(isinstance(v, list) and v for v in values.values()):
        raise UserError(f"bad {where}: a product grid needs values = {{ SETTING = [VALUE, ...], ... }}")
    names = grid.get("names", {})
    if not isinstance(names, dict) or set(names) - set(values):
        raise UserError(f"bad {where}: names = {{ SETTING = \"short name\", ... }} for the settings of values")
    prefix = f"{grid['label']}." if "label" in grid else ""
    out = []
    for combo in itertools.product(*values.values()):
        point = dict(zip(values, combo, strict=True))
        label = prefix + "-".join(f"{names.get(k, k + '_')}{_label_value(v)}" for k, v in point.items())
        given = [opts.rstrip("]")] if opts else []
        options = ";".join([*given, *(f"{k}={_label_value(v)}" for k, v in point.items())])
        out.append({"label": label, "entry": f"{label}={head}[{options}]", **common, "note": f"grid point {point}"})
    return out


def base_values(env_id: str, settings: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The values of ``keys`` a run of ``env_id`` with ``settings`` has: the package's defaults, overlaid with the
    spec's ``train_defaults``, then ``settings``."""
    from ..config import TrainConfig
    from ..schema.aliases import settings_in

    fields = TrainConfig.model_fields
    values = {k: fields[k].default for k in keys if k in fields}
    values.update({k: v for k, v in _spec_defaults(env_id) if k in keys})
    values.update({k: v for k, v in settings_in(dict(settings), "a suite's settings").items() if k in keys})
    return values


@cache
def _spec_defaults(env_id: str) -> tuple[tuple[str, Any], ...]:
    """The spec's ``train_defaults`` under the code's names (read once a process: every cell key of a grid asks)."""
    from ..envs import get_spec
    from ..schema.aliases import settings_in

    return tuple(settings_in(get_spec(env_id).train_defaults, "spec").items())


def moved(env_id: str, settings: Mapping[str, Any], moves: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """``settings`` with each move applied to the task's value of its setting (a coordinate point's settings)."""
    if not moves:
        return dict(settings)
    keys = tuple(k for k, _ in moves)
    now = base_values(env_id, settings, keys)
    return {**settings, **{k: MOVES[how](now[k]) for k, how in moves}}


def not_a_point(env_id: str, settings: Mapping[str, Any], moves: tuple[tuple[str, str], ...]) -> str:
    """Why a coordinate point is not one on this task (empty when it is)."""
    if not moves:
        return ""
    keys = tuple({k for k, _ in moves} | {"test_start", "test_max"})
    before = base_values(env_id, settings, keys)
    after = base_values(env_id, moved(env_id, settings, moves), keys)
    if after == before:
        return "the same settings as the base on this task (" + ", ".join(f"{k} {before[k]}" for k, _ in moves) + ")"
    if after.get("test_max", 1) < after.get("test_start", 1):
        return f"test_max {after['test_max']} below test_start {after['test_start']} on this task"
    return ""


def judged(record: SuiteRecord) -> float | None:
    """A record's judged value: within the budget where the run reports it, else its held-out mean."""
    v = record.result.get("heldout_within")
    return float(v) if v is not None else record.heldout


def missed(meets: Callable[[float | None], bool], records: Sequence[SuiteRecord]) -> int:
    """How many of ``records`` missed the goal (``meets``: the task's) on their judged value."""
    return sum(not meets(judged(r)) for r in records)
