"""``--mode table``: the model writes the policy table (the seed project's approach).

One iteration: training episodes with the kept table plus exploration; a prompt with the experience, the evidence
and the kept table; K candidate tables in the run's answer format (full table, edits, or any registered format);
the keeper scores them on shared test seeds and confirms the best one on fresh seeds before adopting it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..clients.base import Message
from ..formats import make_format, resolve_format_name
from ..formats.base import AnswerFormat, Target
from .base import ModeBase, RunServices, Setup, Step, first_stop, stopped_before_any_answer

__all__ = ["TableMode"]


class TableMode(ModeBase):
    """The model writes the table."""

    name = "table"
    needs_session = False
    judges_candidates = True

    def __init__(self) -> None:
        self.fmt: AnswerFormat[Any] | None = None
        self.target: Target | None = None

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        name = resolve_format_name(setup.cfg.output_format, setup.observation.n_states)
        self.fmt = make_format(name)
        self.target = Target("action", n_actions=setup.actions.n_actions)
        return {"output_format": name}

    def first_messages(self, run: RunServices) -> list[Message]:
        """The first prompt with nothing learned (see :func:`~.base.first_messages`)."""
        assert self.fmt is not None and self.target is not None
        return run.builder.build(run.context(1, self.fmt, self.target, run.best_table, None,
                                             current_source=run.best_source))

    def start(self, run: RunServices) -> None:
        """Score the initial table on the first test seeds and the held-out seeds."""
        run.start_from_initial()

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.fmt is not None and self.target is not None
        # Until a table beats the initial one there is nothing to exploit: training episodes act at random.
        epsilon = 1.0 if run.best_iteration == 0 else run.cfg.explore_epsilon
        train = run.train_episodes(run.best_table, iteration, epsilon)
        best_mean = run.score_best(iteration)
        ctx = run.context(iteration, self.fmt, self.target, run.best_table, best_mean, current_source=run.best_source)
        answers = run.propose(ctx, run.cfg.candidates)
        stopped = stopped_before_any_answer(answers)
        if stopped is not None:  # nothing to judge; the run ends (its training episodes are not recorded)
            return stopped
        tables: list[np.ndarray | None] = [a.parsed.value if a.parsed else None for a in answers]
        sources = [a.parsed.source if a.parsed else None for a in answers]
        verdict = run.judge(tables, iteration, sources)
        return Step(train, epsilon, answers, verdict, verdict.accepted, stop=first_stop(answers))

    def finish(self, run: RunServices) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
