"""The seam between the engine and a mode: what a mode may ask of a run, and what it reports back.

A :class:`Mode` decides what a candidate is, how it becomes a policy and how it is judged; the engine
(:mod:`llm_policy_gen.engine`) owns everything else: the iteration loop, the stops (iterations, ``--max-episodes``,
budget, patience, an unreachable backend), the counters, events, checkpoints and the summary. A mode reaches the
run only through :class:`RunServices`, so a new mode is one file plus one registry line and never imports the
engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from ..clients.session import Answer, LLMSession
    from ..collect import Collector, Episode, Rollouts
    from ..config import TrainConfig
    from ..discretize import ActionDiscretizer, ObservationDiscretizer
    from ..envs.spec import EnvSpec
    from ..formats.base import AnswerFormat, Target
    from ..keeper import Keeper, SeedPlan, Verdict
    from ..memory import ExperienceMemory
    from ..policy import Policy
    from ..prompt import HistoryEntry, PromptBuilder, PromptContext
    from ..proposers.base import Proposer

__all__ = ["RunServices", "Step", "Mode"]


class RunServices(Protocol):
    """What the engine's run offers a mode."""

    cfg: TrainConfig
    spec: EnvSpec
    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    plan: SeedPlan
    collector: Collector
    memory: ExperienceMemory
    keeper: Keeper
    builder: PromptBuilder
    history: list[HistoryEntry]
    rng: np.random.Generator
    iteration: int
    """The last finished iteration."""
    episodes_total: int
    heldout_total: int
    best_heldout: Rollouts | None
    """The kept policy's held-out measurement (reported, never used to decide)."""
    solved_at: int | None
    solved_iteration: int | None

    @property
    def proposer(self) -> Proposer | None:
        """The backend as a proposer (None in modes that need a session instead)."""
        ...

    @property
    def session(self) -> LLMSession | None:
        """The LLM session (None for the non-LLM proposers)."""
        ...

    def log(self, text: str) -> None:
        """One line for the console."""
        ...

    def count(self, episodes: list[Episode]) -> None:
        """Add episodes that fed a decision to the memory and to the totals."""
        ...

    def train_episodes(self, policy: Policy | np.ndarray, iteration: int, epsilon: float = 0.0,
                       n: int | None = None) -> list[Episode]:
        """``n`` (default ``train_episodes``) counted episodes on the next training seeds."""
        ...

    def train_seeds(self, n: int | None = None) -> list[int]:
        """Reserve the next ``n`` (default ``train_episodes``) training seeds, for a mode that runs its own training
        episodes on them (several candidates on the same seeds) and counts them with :meth:`count`."""
        ...

    def context(self, iteration: int, fmt: AnswerFormat[Any], target: Target, current: np.ndarray,
                best_mean: float | None, **kw: Any) -> PromptContext:
        """The prompt context of an iteration (memory, evidence, history and the pending episodes included)."""
        ...

    def propose(self, ctx: PromptContext, k: int) -> list[Answer[Any]]:
        """K candidate answers from the proposer for ``ctx`` (the prompt's size is recorded)."""
        ...

    def judge(self, tables: list[np.ndarray | None], iteration: int,
              sources: list[dict[str, Any] | None] | None = None) -> Verdict:
        """The keeper's verdict on candidate tables (episodes counted, held-out measured and the best saved on
        adoption)."""
        ...

    def save_policy(self, path_name: str, table: np.ndarray, meta: dict[str, Any],
                    source: dict[str, Any] | None = None) -> None:
        """Write a policy file (``best_policy.json`` or ``policies/iter_NNNN.json``) into the run directory."""
        ...

    def measure_best(self, iteration: int) -> None:
        """Measure the kept table on the held-out seeds (reported, never used to decide)."""
        ...

    def save_best(self, meta: dict[str, Any] | None = None) -> None:
        """Write ``best_policy.json`` from the keeper's table (its iteration is the keeper's; ``meta`` adds fields)."""
        ...


@dataclass
class Step:
    """What one iteration of a mode did, for the engine to log, count and judge."""

    train_episodes: list[Episode] = field(default_factory=list)
    train_epsilon: float | None = None
    answers: list[Answer[Any]] = field(default_factory=list)
    verdict: Verdict | None = None
    accepted: bool = False
    eval_mean: float | None = None
    """The chosen candidate's test mean (defaults to the verdict's)."""
    eval_returns: list[float] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    """Extra fields of the iteration's events.jsonl line."""
    stop: str | None = None
    """Why the run must end after this iteration ('budget reached', 'replay exhausted ...')."""
    skipped: bool = False
    """True when the iteration did nothing worth recording (every call stopped before any answer)."""


@runtime_checkable
class Mode(Protocol):
    """What a candidate is and how it is judged."""

    name: str
    needs_session: bool
    """True for modes that ask the model directly (direct mode); the non-LLM proposers cannot serve them."""

    def prepare(self, run: RunServices, resumed: bool) -> dict[str, Any]:
        """Called once before the first iteration this process runs (``resumed``: state comes from a checkpoint
        next); returns facts for config.json (the answer format, ...)."""
        ...

    def start(self, run: RunServices) -> None:
        """A new run's start, before iteration 1 (table modes score the initial table)."""
        ...

    def iterate(self, run: RunServices, iteration: int) -> Step:
        """One iteration."""
        ...

    def finish(self, run: RunServices) -> dict[str, Any]:
        """Called once at the end; returns extra summary fields."""
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ...
