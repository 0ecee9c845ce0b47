"""A suite as data: its tasks, methods and seeds, read from ``data/SUITE.toml`` (or a TOML file a user names).

::

    [suite]
    name = "goals"
    title = "Goal table"
    seeds = "0-9"                       # every task's, unless the task names its own
    fresh_seeds = "30-39"               # optional: seeds no choice of settings has seen, judged last, shown apart
    tables = ["drift"]                  # optional: tables beside the goal table (.extra_tables: drift, answers)

    [[method]]
    label = "offline"
    entry = "offline"                   # a method entry of `compare --methods`
    budget = "task"                     # task | own | steps-of:LABEL | episodes-of:LABEL
    max_states = 0                      # >0: not run on a table of more states (the answer text grows with it)
    max_steps = 0                       # >0: a cell whose budget would pass this many steps is listed, not run
    iterations = 30                     # optional; default 100000 for a budget in episodes or steps (the budget
                                        # ends the run), the mode's own for `own`
    tasks = ["cartpole"]                # optional: the task keys it runs on (default: every task)

    [[task]]
    key = "cartpole"
    env_id = "CartPole-v1"
    budget = 100                        # counted episodes (the `task` budget: --max-episodes)
    goal = 475.0
    exact = false                       # the goal is an exact optimum (equal, not reach)
    need = 8                            # seeds that must meet the goal (and the median must)
    seeds = "0-9"                       # optional
    fresh_seeds = "30-34"               # optional
    threshold = 475.0                   # gymnasium's reward_threshold, when it has one
    reference = -172.2                  # else a published figure that is not ours, and where it comes from
    reference_source = "RL Baselines3 Zoo benchmark.md: PPO, Pendulum-v1, 100k steps"
    settings = { train_episodes = 1 }   # settings every run of the task gets on top of the spec's
    anchors = "..."                     # published figures of other work, as text
    variant_of = "lunarlander"          # a spec variant of that task (the same environment, another table): a peer at
                                        # its own budget reads raw observations, so its runs are the base task's

    [[grid]] ... and [choice] ...       # a settings search and its choice rule (:mod:`.grid`, :mod:`.choice`)

A method's budget: ``task`` gives each run the task's episode budget (``--max-episodes``; a task whose budget is 0
gives none: the method's own); ``own`` leaves the method its own (a peer's is the RL Baselines3 Zoo's
``n_timesteps``); ``steps-of:LABEL`` gives it the counted environment steps that method ``LABEL``'s record of the
same task and seed used (a peer at ``offline``'s interaction), ``episodes-of:LABEL`` the counted episodes.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UserError
from .grid import Choice, grid_methods, parse_choice

__all__ = ["Task", "MethodSpec", "Suite", "BUDGET_KINDS", "EXTRA_TABLES", "suite_names", "load_suite", "parse_suite"]

BUDGET_KINDS = ("task", "own", "steps-of", "episodes-of")
EXTRA_TABLES = ("drift", "answers")
"""The tables a suite may ask for beside the goal table (:mod:`.extra_tables`)."""
TUNING_SEEDS_FROM = 100
"""The first tuning seed: a suite with a ``[choice]`` runs on seeds from here only (0-99 are the judged seeds')."""


@dataclass(frozen=True)
class Task:
    key: str
    env_id: str
    budget: int
    """Counted episodes a ``task``-budget method may use."""
    goal: float
    seeds: tuple[int, ...]
    need: int
    exact: bool = False
    threshold: float | None = None
    """Gymnasium's ``reward_threshold`` for the task, where it has one (a yardstick that is not ours)."""
    settings: dict[str, Any] = field(default_factory=dict)
    anchors: str = ""
    reference: float | None = None
    """Where gymnasium gives no threshold: a published figure that is not ours (transcribed, cited, never a result
    run here), the normalised score's 1."""
    reference_source: str = ""
    variant_of: str = ""
    """The task whose environment this one's spec reads through another table (``hopper-rich`` of ``hopper``): a
    peer at its own budget, which reads the raw observations, would make the same runs, so its cells here are listed
    as the base task's, not run again."""
    fresh_seeds: tuple[int, ...] = ()
    """Seeds that no choice of spec structure or settings has seen, judged once, last, and shown beside (never mixed
    with) the judged seeds' figures."""

    @property
    def yardstick(self) -> float | None:
        """The normalised score's 1: gymnasium's threshold, else the cited reference."""
        return self.threshold if self.threshold is not None else self.reference

    def meets(self, value: float | None) -> bool:
        """Whether ``value`` meets the goal: reaches it, or equals it for an exact optimum (None never does)."""
        if value is None:
            return False
        return abs(value - self.goal) < 1e-9 if self.exact else value >= self.goal - 1e-9


@dataclass(frozen=True)
class MethodSpec:
    label: str
    entry: str
    """The method entry as ``compare --methods`` takes it (:mod:`llm_policy_gen.sweep.methods`)."""
    budget: str = "task"
    max_states: int = 0
    max_steps: int = 0
    iterations: int = 0
    """Iterations a run gets; 0: 100,000 for a budget in episodes or steps (the budget ends the run), else the
    engine's default."""
    note: str = ""
    tasks: tuple[str, ...] = ()
    """The task keys it runs on (empty: every task of the suite)."""
    moves: tuple[tuple[str, str], ...] = ()
    """A coordinate grid's point: (setting, ``half`` | ``double``) of the task's value (:mod:`.grid`)."""

    def runs_on(self, task: Task) -> bool:
        return not self.tasks or task.key in self.tasks

    @property
    def budget_kind(self) -> str:
        return self.budget.split(":", 1)[0]

    @property
    def budget_source(self) -> str | None:
        """The label whose record gives this method's budget (``steps-of:offline`` -> ``offline``)."""
        return self.budget.split(":", 1)[1] if ":" in self.budget else None


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    tasks: tuple[Task, ...]
    methods: tuple[MethodSpec, ...]
    description: str = ""
    tables: tuple[str, ...] = ()
    """Tables beside the goal table (:data:`~.extra_tables.EXTRA_TABLES`: ``drift``, ``answers``), whose figures
    each record of the suite carries."""
    choice: Choice | None = None
    """The choice rule its grids are read with (:mod:`.choice`), when it tunes settings."""
    costs_from: str = ""
    """A shipped suite whose records give a run's time where this suite has none on the task (projection only)."""

    def task(self, key: str) -> Task:
        for t in self.tasks:
            if t.key == key:
                return t
        raise UserError(f"unknown task {key!r} in suite {self.name}; accepted: {', '.join(t.key for t in self.tasks)}")

    def method(self, label: str) -> MethodSpec:
        for m in self.methods:
            if m.label == label:
                return m
        raise UserError(f"unknown method {label!r} in suite {self.name}; accepted: "
                        f"{', '.join(m.label for m in self.methods)}")


def suite_names() -> list[str]:
    """The suites shipped with the package."""
    folder = resources.files(__package__).joinpath("data")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_suite(name_or_path: str) -> Suite:
    """A shipped suite by name, or a suite TOML file by path; a bad one is a UserError naming what is wrong."""
    path = Path(name_or_path)
    if name_or_path.endswith(".toml") or path.is_file():
        if not path.is_file():
            raise UserError(f"bad suite {name_or_path!r}: no such file")
        text, where = path.read_text(encoding="utf-8"), str(path)
    else:
        if name_or_path not in suite_names():
            raise UserError(f"unknown suite {name_or_path!r}; accepted: {', '.join(suite_names())} or a .toml file")
        text = resources.files(__package__).joinpath("data", f"{name_or_path}.toml").read_text(encoding="utf-8")
        where = f"suite {name_or_path}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"bad {where}: {e}") from None
    return parse_suite(data, where)


def parse_seeds_text(text: object, where: str) -> tuple[int, ...]:
    from ..sweep.plan import parse_seeds

    if isinstance(text, list) and all(isinstance(s, int) and s >= 0 for s in text):
        return tuple(text)
    if not isinstance(text, str):
        raise UserError(f"bad {where}: seeds must be a string such as \"0-9\" or a list of integers")
    return tuple(parse_seeds(text))


def _need(d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise UserError(f"bad {where}: {key} is missing")
    value = d[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise UserError(f"bad {where}: {key} = {value!r} has the wrong type")
    return value


def parse_suite(data: dict[str, Any], where: str) -> Suite:
    """The suite a parsed TOML document describes."""
    head = data.get("suite")
    if not isinstance(head, dict):
        raise UserError(f"bad {where}: no [suite] table")
    name = str(_need(head, "name", str, where))
    seeds = parse_seeds_text(head.get("seeds", "0-9"), f"{where} [suite]")
    fresh = parse_seeds_text(head["fresh_seeds"], f"{where} [suite]") if "fresh_seeds" in head else ()
    tasks = []
    for i, t in enumerate(data.get("task", [])):
        w = f"{where} task {i + 1}"
        settings = t.get("settings", {})
        if not isinstance(settings, dict):
            raise UserError(f"bad {w}: settings must be a table")
        task_seeds = parse_seeds_text(t["seeds"], w) if "seeds" in t else seeds
        threshold, reference = t.get("threshold"), t.get("reference")
        tasks.append(Task(key=_need(t, "key", str, w), env_id=_need(t, "env_id", str, w),
                          budget=int(_need(t, "budget", int, w)), goal=float(_need(t, "goal", (int, float), w)),
                          seeds=task_seeds, need=int(t.get("need", max(1, (8 * len(task_seeds)) // 10))),
                          exact=bool(t.get("exact", False)),
                          threshold=None if threshold is None else float(threshold),
                          settings=dict(settings), anchors=str(t.get("anchors", "")),
                          reference=None if reference is None else float(reference),
                          reference_source=str(t.get("reference_source", "")),
                          variant_of=str(t.get("variant_of", "")),
                          fresh_seeds=parse_seeds_text(t["fresh_seeds"], w) if "fresh_seeds" in t else fresh))
    methods = []
    grids = [m for i, g in enumerate(data.get("grid", [])) for m in grid_methods(g, f"{where} grid {i + 1}")]
    for i, m in enumerate([*data.get("method", []), *grids]):
        w = f"{where} method {i + 1}"
        spec = MethodSpec(label=_need(m, "label", str, w), entry=_need(m, "entry", str, w),
                          budget=str(m.get("budget", "task")), max_states=int(m.get("max_states", 0)),
                          max_steps=int(m.get("max_steps", 0)), iterations=int(m.get("iterations", 0)),
                          note=str(m.get("note", "")), tasks=_names(m.get("tasks", []), f"{w}: tasks"),
                          moves=tuple(m.get("moves", ())))
        plain = spec.budget_kind in ("task", "own")
        if spec.budget_kind not in BUDGET_KINDS or (spec.budget_source is None) != plain:
            raise UserError(f"bad {w}: budget {spec.budget!r}; accepted task, own, steps-of:LABEL, episodes-of:LABEL")
        methods.append(spec)
    labels = [m.label for m in methods]
    for m in methods:
        if m.budget_source is not None and m.budget_source not in labels:
            raise UserError(f"bad {where}: method {m.label}'s budget names {m.budget_source!r}, not a method of it")
    keys = [t.key for t in tasks]
    for t in tasks:
        if t.variant_of and (t.variant_of not in keys or t.variant_of == t.key):
            raise UserError(f"bad {where}: task {t.key}'s variant_of names {t.variant_of!r}, not another task of it")
    for m in methods:
        stray = [k for k in m.tasks if k not in keys]
        if stray:
            raise UserError(f"bad {where}: method {m.label}'s tasks name {stray[0]!r}, not a task of it")
    tables = _names(head.get("tables", []), f"{where} [suite]: tables")
    unknown = [t for t in tables if t not in EXTRA_TABLES]
    if unknown:
        raise UserError(f"bad {where}: tables names {unknown[0]!r}; accepted: {', '.join(EXTRA_TABLES)}")
    for what, names in (("task", keys), ("method", labels)):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UserError(f"bad {where}: {what} {twice[0]!r} appears twice")
    if not tasks or not methods:
        raise UserError(f"bad {where}: a suite needs at least one [[task]] and one [[method]] or [[grid]]")
    choice = parse_choice(data.get("choice"), where)
    if choice is not None:
        if choice.base and choice.base not in labels:
            raise UserError(f"bad {where} [choice]: base {choice.base!r} is not a method of it")
        judged = sorted({s for t in tasks for s in (*t.seeds, *t.fresh_seeds) if s < TUNING_SEEDS_FROM})
        if judged:
            raise UserError(f"bad {where}: a suite that chooses settings runs on tuning seeds ({TUNING_SEEDS_FROM} "
                            f"and up), never on the judged seeds' range 0-{TUNING_SEEDS_FROM - 1} (seed {judged[0]})")
    return Suite(name=name, title=str(head.get("title", name)), tasks=tuple(tasks), methods=tuple(methods),
                 description=str(head.get("description", "")), tables=tables, choice=choice,
                 costs_from=str(head.get("costs_from", "")))


def _names(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UserError(f"bad {where} must be a list of names")
    return tuple(dict.fromkeys(value))
