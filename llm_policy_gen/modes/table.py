"""``--mode table``: the model writes the policy table (the seed project's approach).

One iteration: training episodes with the kept table plus exploration; a prompt with the experience, the evidence
and the kept table; K candidate tables in the run's answer format (full table, edits, or any registered format);
the keeper scores them on shared test seeds and confirms the best one on fresh seeds before adopting it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats import make_format, resolve_format_name
from ..formats.base import AnswerFormat, Target
from .base import RunServices, Step

__all__ = ["TableMode"]


class TableMode:
    """The model writes the table."""

    name = "table"
    needs_session = False

    def __init__(self) -> None:
        self.fmt: AnswerFormat[Any] | None = None
        self.target: Target | None = None

    def prepare(self, run: RunServices, resumed: bool) -> dict[str, Any]:
        name = resolve_format_name(run.cfg.output_format, run.observation.n_states)
        self.fmt = make_format(name)
        self.target = Target("action", n_actions=run.actions.n_actions)
        return {"output_format": name}

    def start(self, run: RunServices) -> None:
        """Score the initial table on the first test seeds and the held-out seeds."""
        _, first = run.keeper.score_best(1)
        run.count(first)
        run.measure_best(0)
        run.save_best()

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.fmt is not None and self.target is not None
        # Until a table beats the initial one there is nothing to exploit: training episodes act at random.
        epsilon = 1.0 if run.keeper.best_iteration == 0 else run.cfg.explore_epsilon
        train = run.train_episodes(run.keeper.best_table, iteration, epsilon)
        best_mean, extra = run.keeper.score_best(iteration)
        run.count(extra)
        ctx = run.context(iteration, self.fmt, self.target, run.keeper.best_table, best_mean,
                          current_source=run.keeper.best_source)
        answers = run.propose(ctx, run.cfg.candidates)
        stops = [a.stop for a in answers if a.stop]
        if stops and not any(a.ok or a.failed or a.errors for a in answers):
            return Step(train, epsilon, answers, stop=stops[0], skipped=True)
        tables: list[np.ndarray | None] = [a.parsed.value if a.parsed else None for a in answers]
        sources = [a.parsed.source if a.parsed else None for a in answers]
        verdict = run.judge(tables, iteration, sources)
        return Step(train, epsilon, answers, verdict, verdict.accepted, stop=stops[0] if stops else None)

    def finish(self, run: RunServices) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
