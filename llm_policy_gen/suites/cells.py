"""A suite's cells: each (task, method, seed) it asks for, with the budget, settings and run it gets, and its state.

:func:`expand` turns a :class:`~.definition.Suite` (filtered or overridden by ``bench --tasks/--methods/--seeds``)
into :class:`Cell` s. A cell's budget is its method's: ``task`` gives ``max_episodes`` = the task's budget (none on
a task whose budget is 0: the method's own), ``own`` nothing (a peer's is the zoo's ``n_timesteps``),
``steps-of:LABEL`` / ``episodes-of:LABEL`` the counted steps or episodes of the newest record of LABEL's cell for the
same task and seed; a cell whose source has no record yet is ``waiting`` (``bench`` runs the sources first, then the
cells that wait for them). Its iterations are the method's (``iterations``), else 100,000 when the budget is in
episodes or steps (the budget ends the run), else the engine's.

Each cell's run goes where ``compare --out OUT/<task key>`` puts it (:class:`~llm_policy_gen.sweep.task.RunTask`),
so a run that ``compare`` made into the same layout is found and adopted. A cell's :attr:`Cell.state` says what
``bench`` will do with it:

* ``recorded`` -- its key has a record (the committed store or ``OUT/records.jsonl``): done, never run again;
* ``finished`` -- its run directory holds a finished run (``RunDir.state()``) without a record: recorded, not run;
* ``resumable`` -- a run started, interrupted or failed there: resumed from its checkpoint;
* ``run`` -- nothing (or a stale folder) there: run;
* ``waiting`` -- its budget comes from another cell's record, which does not exist yet;
* ``skipped`` -- it cannot run, and :attr:`Cell.why` says why (listed, never silently dropped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..run.files import RunDir, RunState
from ..sweep.methods import Method, check_options, parse_method, split_methods
from ..sweep.plan import parse_seeds
from ..sweep.task import RunTask
from .definition import MethodSpec, Suite, Task
from .grid import missed, moved, not_a_point
from .store import SuiteRecord, cell_key

__all__ = ["STATES", "Cell", "Selection", "select", "expand", "DEFAULT_ITERATIONS", "BUDGET_KEYS",
           "takes_task_settings", "settings_of", "key_of", "calls_a_model", "static_skips", "with_state", "counts",
           "own_steps", "grid_states"]

STATES = ("recorded", "finished", "resumable", "run", "waiting", "skipped")
DEFAULT_ITERATIONS = 100_000
"""Iterations of a cell whose budget is in episodes or steps and whose method names none: the budget ends the run."""
BUDGET_KEYS = {"steps-of": ("max_steps", "env_steps"), "episodes-of": ("max_episodes", "episodes")}
"""A derived budget: (the setting it gives, the source record's result key it copies)."""


@dataclass
class Cell:
    """One (task, method, seed) of a suite."""

    task: Task
    method: MethodSpec
    seed: int
    budget: dict[str, Any]
    """``{"max_episodes": N}``, ``{"max_steps": N}`` or ``{}`` (the method's own); empty while ``waiting``."""
    settings: dict[str, Any]
    """The settings the suite gives the run on top of the spec's: the task's (none for a peer), the iterations and
    the entry's options."""
    state: str = "run"
    why: str = ""
    """Why a cell is ``waiting`` or ``skipped``."""
    key: str = ""
    """:func:`~.store.cell_key` of the cell (empty while ``waiting``)."""
    run: RunTask | None = None
    """Its run (None while ``waiting`` and for ``recorded`` cells of another layout)."""
    record: SuiteRecord | None = None
    """The record that makes it ``recorded``."""
    explicit: bool = False
    """Whether the user named its method in ``--methods`` (a refusal of its run is then a refusal of the command)."""

    @property
    def name(self) -> str:
        return f"{self.task.key}/{self.method.label} seed {self.seed}"


@dataclass(frozen=True)
class Selection:
    """What ``bench`` runs of a suite: its tasks, its methods (suite labels or new entries) and the seeds."""

    tasks: tuple[Task, ...]
    methods: tuple[MethodSpec, ...]
    explicit: frozenset[str] = frozenset()
    """The labels the user named in ``--methods``."""
    seeds: tuple[int, ...] | None = None
    """``--seeds``: every task's seeds (None: each task's own)."""


def select(suite: Suite, tasks: str | None = None, methods: str | None = None, seeds: str | None = None) -> Selection:
    """The tasks, methods and seeds ``--tasks``, ``--methods`` and ``--seeds`` pick (None: all, the task's own).
    A ``--methods`` entry that is not a label of the suite is a new method in the ``compare --methods`` grammar
    (``gemini:MODEL``, ``mine=openai:gpt-x@table[...]``) with the ``task`` budget; a bad one is a UserError."""
    chosen_tasks = suite.tasks if tasks is None else tuple(suite.task(k) for k in _names(tasks, "--tasks"))
    if suite.choice is not None and seeds is not None:
        from .definition import TUNING_SEEDS_FROM

        low = min(parse_seeds(seeds))
        if low < TUNING_SEEDS_FROM:
            raise UserError(f"bad --seeds {seeds!r}: suite {suite.name} chooses settings, on tuning seeds "
                            f"{TUNING_SEEDS_FROM} and up only (seed {low} is in the judged seeds' range)")
    if methods is None:
        _distinct_runs(suite.methods, f"suite {suite.name}")
        return Selection(chosen_tasks, suite.methods, frozenset(), _seeds(seeds))
    labels = {m.label for m in suite.methods}
    chosen: list[MethodSpec] = []
    for part in split_methods(methods):
        if part in labels:
            spec = suite.method(part)
        else:
            m = parse_method(part)
            spec = MethodSpec(label=m.label or m.display(), entry=m.written, budget="task",
                              note="a method given to bench --methods")
            if spec.label in labels:
                raise UserError(f"bad --methods entry {part!r}: its name {spec.label!r} is a method of suite "
                                f"{suite.name}; give it another LABEL= (e.g. mine={part})")
        if all(c.label != spec.label for c in chosen):
            chosen.append(spec)
    if not chosen:
        raise UserError(f"bad --methods {methods!r}: give suite labels ({', '.join(sorted(labels))}) or method "
                        "entries, comma-separated")
    _distinct_runs(chosen, "--methods")
    return Selection(chosen_tasks, tuple(chosen), frozenset(s.label for s in chosen), _seeds(seeds))


def _distinct_runs(methods: Sequence[MethodSpec], where: str) -> None:
    """Refuse two methods whose runs would share run directories (the entry's run id, as ``compare`` names it)."""
    stems: dict[str, str] = {}
    for spec in methods:
        stem = parse_method(spec.entry).run_stem
        if stem in stems:
            raise UserError(f"bad {where}: {spec.label!r} and {stems[stem]!r} would share run directories "
                            f"({stem}_s0, ...); give one of them another LABEL=")
        stems[stem] = spec.label


def _names(text: str, flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"bad {flag} {text!r}: give comma-separated names")
    return list(dict.fromkeys(names))


def _seeds(text: str | None) -> tuple[int, ...] | None:
    return None if text is None else tuple(parse_seeds(text))


# ---------------------------------------------------------------------------------------------------- cells
def _method(spec: MethodSpec) -> Method:
    return parse_method(spec.entry)


def takes_task_settings(spec: MethodSpec) -> bool:
    """Whether the method's runs take the task's settings, which tune the keeper and the proposals: every mode's but
    one that neither proposes nor judges candidates (a peer: its network learns on the raw observations)."""
    from ..modes import MODES

    cls = MODES.load(_method(spec).run_mode())
    return bool(getattr(cls, "proposes", True) or getattr(cls, "judges_candidates", True))


def settings_of(task: Task, spec: MethodSpec, budget: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a cell gives its run besides the budget: the task's (when the mode judges candidates), the
    iterations, the entry's options."""
    out: dict[str, Any] = dict(task.settings) if takes_task_settings(spec) else {}
    if spec.moves:  # a coordinate grid's point: the task's value of a setting moved (:mod:`.grid`)
        out = moved(task.env_id, out, spec.moves)
    iterations = spec.iterations or (DEFAULT_ITERATIONS if budget else 0)
    if iterations:
        out["iterations"] = iterations
    return {**out, **_method(spec).options}


def key_of(task: Task, spec: MethodSpec, seed: int, budget: Mapping[str, Any]) -> str:
    """The cell key of ``spec`` on ``task`` and ``seed`` at ``budget``: what every reader of the store compares."""
    return cell_key(task.env_id, spec.entry, seed, budget, settings_of(task, spec, budget))


def _budget(suite: Suite, task: Task, spec: MethodSpec, seed: int, records: Mapping[str, SuiteRecord],
            depth: int = 0) -> tuple[dict[str, Any] | None, str]:
    """The cell's budget, or None and why it waits."""
    kind, source = spec.budget_kind, spec.budget_source
    if kind == "task":  # a task without an episode budget (0) leaves the method its own
        return ({"max_episodes": task.budget} if task.budget else {}), ""
    if kind == "own" or source is None:
        return {}, ""
    src = suite.method(source)
    if depth > len(suite.methods):
        raise UserError(f"bad suite {suite.name}: method {spec.label}'s budget goes round in a circle")
    src_budget, why = _budget(suite, task, src, seed, records, depth + 1)
    if src_budget is None:
        return None, why
    key = key_of(task, src, seed, src_budget)
    rec = records.get(key)
    setting, result_key = BUDGET_KEYS[kind]
    value = None if rec is None else rec.result.get(result_key)
    if value is None:
        return None, f"waits for {source} seed {seed}'s record ({kind} {source})"
    return {setting: int(value)}, ""


def _task_cells(suite: Suite, task: Task, spec: MethodSpec, seeds: Sequence[int], out: Path,
                records: Mapping[str, SuiteRecord], explicit: bool, llm_settings: Mapping[str, Any]) -> list[Cell]:
    method = _method(spec)
    cells = []
    for seed in seeds:
        budget, why = _budget(suite, task, spec, seed, records)
        settings = settings_of(task, spec, budget or {})
        cell = Cell(task, spec, seed, dict(budget or {}), settings, explicit=explicit)
        run_settings = {k: v for k, v in settings.items() if k not in method.options}
        check_options(method, run_settings)
        if budget is None:
            placeholder = {BUDGET_KEYS[spec.budget_kind][0]: 1}  # checked as a run with some budget would be
            cell.state, cell.why = "waiting", why
            cell.run = RunTask(task.env_id, method.written, seed, str(out / task.key),
                               {**run_settings, **placeholder, **llm_settings, **method.options}, spec.label)
            cells.append(cell)
            continue
        cell.key = cell_key(task.env_id, spec.entry, seed, budget, settings)
        cell.run = RunTask(task.env_id, method.written, seed, str(out / task.key),
                           {**run_settings, **budget, **llm_settings, **method.options}, spec.label)
        cell.record = records.get(cell.key)
        cell.state = "recorded" if cell.record is not None else _disk_state(cell.run)
        cells.append(cell)
    grid_states(suite, cells, records)
    return cells


def grid_states(suite: Suite, cells: Sequence[Cell], records: Mapping[str, SuiteRecord]) -> None:
    """Mark one method's cells on one task (``cells``, in seed order) that are not points of its grid there, and, with
    a ``[choice]`` that stops, those that wait for the base's records on every seed or for their earlier seeds (a
    change runs one seed at a time), or have stopped: missed the goal on more seeds than the base in all
    (:mod:`.choice`)."""
    choice = suite.choice
    todo = [c for c in cells if c.state in ("run", "resumable")]
    if not todo:
        return
    task, spec = cells[0].task, cells[0].method
    why = not_a_point(task.env_id, task.settings, spec.moves)
    if why or choice is None or not choice.stop or spec.label == choice.base:
        for c in todo if why else ():
            _skip(c, f"not a point of the grid: {why}")
        return
    base, seeds = suite.method(choice.base), [c.seed for c in cells]
    base_recs = [records.get(key_of(task, base, s, cells[0].budget)) for s in seeds]
    if any(r is None for r in base_recs):
        for c in todo:
            c.state, c.why = "waiting", f"waits for {base.label}'s records on every seed (then one seed at a time)"
        return
    allowed = missed(task.meets, [r for r in base_recs if r is not None])
    for c in todo:
        before = [records.get(key_of(task, spec, s, c.budget)) for s in seeds[:seeds.index(c.seed)]]
        ran = [r for r in before if r is not None]
        if missed(task.meets, ran) > allowed:
            _skip(c, f"stopped: it missed the goal on {missed(task.meets, ran)} of its first {len(ran)} seeds, more "
                  f"than {base.label} in all ({allowed})")
        elif len(ran) < len(before):
            first = seeds[next(i for i, r in enumerate(before) if r is None)]
            c.state, c.why = "waiting", f"waits for its seed {first}'s record (a change runs one seed at a time)"


def _disk_state(task: RunTask) -> str:
    state = RunDir(task.run_dir).state()
    if state is RunState.FINISHED:
        return "finished"
    return "resumable" if state.resumable else "run"


def expand(suite: Suite, selection: Selection, out: Path, records: Mapping[str, SuiteRecord],
           llm_settings: Mapping[str, Any] | None = None) -> list[Cell]:
    """Every cell of ``selection``, task-major, each with its state (:data:`STATES`) as ``records`` (the newest
    record of each cell key) and ``out``'s run directories say; ``llm_settings`` (``budget_usd``) go to the runs of
    methods that call a language model. The suite's own limits make a cell ``skipped`` (:func:`static_skips`)."""
    out = Path(out).resolve()
    cells: list[Cell] = []
    for task in selection.tasks:
        seeds = selection.seeds if selection.seeds is not None else task.seeds
        for spec in (m for m in selection.methods if m.runs_on(task)):  # a method that names its tasks: those
            extra = dict(llm_settings or {}) if calls_a_model(spec) else {}
            cells += _task_cells(suite, task, spec, seeds, out, records, spec.label in selection.explicit, extra)
    static_skips(cells)
    return cells


def calls_a_model(spec: MethodSpec) -> bool:
    """Whether the method's runs call a language model through a backend that can cost money."""
    from ..backends import is_llm, parse_backend_spec
    from ..modes import MODES

    method = _method(spec)
    if not getattr(MODES.load(method.run_mode()), "needs_backend", True) or method.backend_spec is None:
        return False
    try:
        return bool(is_llm(parse_backend_spec(method.backend_spec)[0]))
    except UserError:
        return False


def static_skips(cells: Sequence[Cell]) -> None:
    """Mark the cells the suite's own limits leave out: a method's ``max_states`` under the task's table, a budget
    over the method's ``max_steps`` (a derived one, or a peer's zoo budget)."""
    states: dict[str, int] = {}
    for cell in cells:
        if cell.state in ("recorded", "finished"):
            continue
        m = cell.method
        if m.max_states:
            n = states.get(cell.task.key)
            if n is None:
                n = states[cell.task.key] = _n_states(cell)
            if n > m.max_states:
                _skip(cell, f"{m.label} is not run on tables of more than {m.max_states:,} states (this task's has "
                      f"{n:,})")
                continue
        if cell.task.variant_of and m.budget_kind == "own" and cell.run is not None and cell.run.mode == "peer":
            _skip(cell, f"the same run as on task {cell.task.variant_of} (a peer at its own budget reads the raw "
                  "observations, not this spec's table)")
            continue
        steps = cell.budget.get("max_steps") if cell.budget else own_steps(cell)
        if m.max_steps and steps is not None and steps > m.max_steps:
            _skip(cell, f"its budget of {steps:,} steps is over {m.label}'s max_steps {m.max_steps:,}")


def _skip(cell: Cell, why: str) -> None:
    cell.state, cell.why = "skipped", why


def _n_states(cell: Cell) -> int:
    from ..sweep.plan import resolve

    assert cell.run is not None
    return int(resolve(cell.run.config())[0].n_states)


def own_steps(cell: Cell) -> int | None:
    """A peer's own budget (the zoo's ``n_timesteps``) where the method's budget is ``own``; None otherwise, or when
    the peers extra is not there (the run's own check says so)."""
    if cell.method.budget_kind != "own" or cell.run is None or cell.run.mode != "peer":
        return None
    import importlib.util

    if importlib.util.find_spec("rl_zoo3") is None:
        return None
    from ..envs.catalog import gym_id
    from ..peers.zoo import hyperparameters

    algo = str(cell.run.settings.get("peer_algo", "ppo"))
    try:
        return hyperparameters(algo, gym_id(cell.task.env_id)).n_timesteps
    except (UserError, KeyError):
        return None


def with_state(cell: Cell, state: str, why: str = "") -> Cell:
    return replace(cell, state=state, why=why)


def counts(cells: Sequence[Cell]) -> dict[str, int]:
    """How many cells are in each state (every state named, in :data:`STATES`' order)."""
    out = {s: 0 for s in STATES}
    for c in cells:
        out[c.state] += 1
    return out

