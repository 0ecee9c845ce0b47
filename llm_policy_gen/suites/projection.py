"""What the cells ``bench`` will run are projected to cost, said before the first run: interaction, time, calls,
tokens and dollars.

* interaction: the budget (``max_episodes`` / ``max_steps``; a peer's own is the zoo's ``n_timesteps``);
* time: the mean wall seconds of the records of the same method on the same task, where there are any; else of the
  records of the same task whose entry runs the same method with other options (another point of a settings grid), or
  of the suite's ``costs_from`` suite (``tune``: the goal table's runs);
* a method that calls a language model: its calls, tokens and cost per cell from the records of the same method on
  the same task where there are any; else the iterations ``offline``'s record of the same task and seed took (the
  same keeper, the same budget) or, without one, at most the budget over the fewest episodes an iteration counts,
  times the tables judged per iteration; the prompt's tokens from the run's first prompt (its characters / 3, as the
  session's own reservation guesses) and :data:`ANSWER_TOKENS` per answer; dollars from the backend's price
  (:mod:`llm_policy_gen.clients.pricing`), unpriced where it has none.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from .cells import Cell, calls_a_model
from .store import SuiteRecord

__all__ = ["ANSWER_TOKENS", "Projection", "project", "total"]

ANSWER_TOKENS = 2000
"""Tokens guessed per answer (what a call's reservation against the budget guesses too)."""


@dataclass
class Projection:
    """One cell's projected cost (None: not known)."""

    episodes: int | None = None
    steps: int | None = None
    wall_s: float | None = None
    calls: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    basis: str = ""
    """Where the calls come from (``records``, ``offline's iterations``, ``at most``)."""

    def text(self) -> str:
        parts = []
        if self.episodes is not None:
            parts.append(f"{self.episodes:,} episodes")
        if self.steps is not None:
            parts.append(f"{self.steps:,} steps")
        if self.wall_s is not None:
            parts.append(f"~{self.wall_s:,.0f} s wall")
        if self.calls is not None:
            tokens = f"{(self.tokens_in or 0):,}+{(self.tokens_out or 0):,} tokens"
            cost = "unpriced" if self.cost_usd is None else f"${self.cost_usd:.4f}"
            parts.append(f"{'≤' if self.basis == 'at most' else '~'}{self.calls:,} calls, {tokens}, {cost}")
        return ", ".join(parts) or "its own budget"


@dataclass
class _Model:
    """What a method's run on a task says of its calls before it starts."""

    prompt_tokens: int
    per_iteration: int
    provider: str
    model: str
    min_episodes: int
    iterations: int
    prices_file: str | None
    free: bool = False
    """Local compute (an in-process model): every call costs 0, as the run counts it."""


def _model_of(cell: Cell) -> _Model:
    """Build the cell's run in a scratch folder, without starting it (as ``compare``'s check does)."""
    from ..clients.base import is_free
    from ..loggers.console import Console
    from ..modes.base import tables_per_iteration
    from ..run.files import RunDir
    from ..run.prepare import prepare
    from ..run.services import Run

    assert cell.run is not None
    p = prepare(cell.run.config())
    cfg = p.cfg
    with tempfile.TemporaryDirectory(prefix="llm-policy-gen-projection-") as tmp:
        run = Run(cfg, p.spec, p.mode, RunDir(Path(tmp)), Console(cfg.iterations, p.label, enabled=False,
                                                                      sink=lambda s: None))
        try:
            messages = run.first_messages() or []
            provider = run.session.provider if run.session is not None else str(run.backend_name)
            model = str(run.model or "")
            prices = run.session.prices_file if run.session is not None else None
            free = run.session is not None and is_free(run.session.client)
        finally:
            run.collector.close()
    k = tables_per_iteration(p.mode, cfg)
    return _Model(prompt_tokens=sum(len(m.content) for m in messages) // 3, per_iteration=k, provider=provider,
                  model=model, min_episodes=max(1, cfg.train_episodes + k * cfg.test_start),
                  iterations=cfg.iterations, prices_file=prices, free=free)


def _same(records: Sequence[SuiteRecord], cell: Cell) -> list[SuiteRecord]:
    return [r for r in records if r.method == cell.method.label and r.task == cell.task.key]


def _llm(cell: Cell, proj: Projection, records: Sequence[SuiteRecord], model: _Model) -> None:
    from ..clients.pricing import cost_usd

    mine = [r for r in _same(records, cell) if r.result.get("calls")]
    if mine:
        proj.basis = "records"
        proj.calls = round(mean(float(r.result["calls"]) for r in mine))
        proj.tokens_in = round(mean(float(r.result.get("tokens_in") or 0) for r in mine))
        proj.tokens_out = round(mean(float(r.result.get("tokens_out") or 0) for r in mine))
    else:
        offline = [r for r in records if r.entry == "offline" and r.task == cell.task.key and r.seed == cell.seed
                   and r.result.get("iterations")]
        if offline and cell.budget.get("max_episodes"):
            proj.basis, iterations = "offline's iterations", int(offline[-1].result["iterations"])
        else:
            limit = cell.budget.get("max_episodes")
            bound = math.ceil(limit / model.min_episodes) if limit else model.iterations
            proj.basis, iterations = "at most", min(model.iterations, bound)
        proj.calls = iterations * model.per_iteration
        proj.tokens_in, proj.tokens_out = proj.calls * model.prompt_tokens, proj.calls * ANSWER_TOKENS
    proj.cost_usd = 0.0 if model.free else cost_usd(model.provider, model.model, proj.tokens_in or 0,
                                                    proj.tokens_out or 0, model.prices_file)


def _like(cell: Cell, records: Sequence[SuiteRecord]) -> list[float]:
    """The wall seconds of the records of the same task whose entry runs the same method (its label and options
    aside: another point of a settings grid, or the suite's ``costs_from`` records)."""
    from ..sweep.methods import parse_method

    canonical = parse_method(cell.method.entry).canonical
    entries: dict[str, bool] = {}
    out = []
    for r in records:
        if r.task != cell.task.key or r.result.get("wall_s") is None:
            continue
        if r.entry not in entries:
            entries[r.entry] = parse_method(r.entry).canonical == canonical
        if entries[r.entry]:
            out.append(float(r.result["wall_s"]))
    return out


def project(cells: Sequence[Cell], records: Sequence[SuiteRecord],
            rates: Sequence[SuiteRecord] = ()) -> dict[str, Projection]:
    """Each cell's projection, by :attr:`Cell.name` (``records``: every record of the committed store and
    ``OUT``'s, in file order; ``rates``: the records of the suite's ``costs_from`` suite, a time per run where the
    suite has none of the same method on the task)."""
    from .cells import own_steps

    models: dict[tuple[str, str], _Model] = {}
    out: dict[str, Projection] = {}
    for cell in cells:
        proj = Projection(episodes=cell.budget.get("max_episodes"),
                          steps=cell.budget.get("max_steps") or own_steps(cell))
        walls = [float(r.result["wall_s"]) for r in _same(records, cell) if r.result.get("wall_s") is not None] \
            or _like(cell, [*records, *rates])
        proj.wall_s = mean(walls) if walls else None
        if cell.run is not None and cell.state != "waiting" and calls_a_model(cell.method):
            key = (cell.task.key, cell.method.label)
            if key not in models:
                models[key] = _model_of(cell)
            _llm(cell, proj, records, models[key])
        out[cell.name] = proj
    return out


def total(projections: Mapping[str, Projection]) -> dict[str, Any]:
    """The sums over cells (None where no cell has the figure); ``unpriced`` counts cells with calls and no price."""
    values = list(projections.values())

    def add(name: str) -> float | None:
        got = [getattr(p, name) for p in values if getattr(p, name) is not None]
        return sum(got) if got else None

    return {"cells": len(values), "episodes": add("episodes"), "steps": add("steps"), "wall_s": add("wall_s"),
            "calls": add("calls"), "tokens_in": add("tokens_in"), "tokens_out": add("tokens_out"),
            "cost_usd": add("cost_usd"),
            "unpriced": sum(1 for p in values if p.calls and p.cost_usd is None),
            "bounded": any(p.basis == "at most" for p in values)}
