"""One run's parts, the base of :class:`~.services.Run`: what every mode shares, built once, and the counting.

:class:`RunParts` builds and owns the environment's discretizers, the seed plan, the collector, the experience memory,
the keeper, the prompt builder, the transcript, the backend (None for a mode that proposes nothing:
:attr:`~llm_policy_gen.modes.base.ModeBase.needs_backend`), the counters and the run directory, and counts every
episode a service plays (memory, totals and the prompt's fresh episodes); its :meth:`RunParts.state_dict` is their
part of the checkpoint. What a mode may do with the parts is :class:`~.services.Run`'s (``RunServices``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..backends.factory import Backend, make_backend
from ..clients.base import Message
from ..clients.session import LLMSession
from ..clients.transcript import RecordedCalls, Transcript
from ..clients.usage import Budget, CallLimiter, Usage
from ..collect import Collector, Episode, Rollouts
from ..config import TrainConfig
from ..envs.spec import EnvSpec
from ..keeper import Keeper, SeedPlan
from ..loggers.console import Console
from ..modes.base import Mode, Setup, method_of, needs_backend, proposes, uses_chat
from ..prompting.builder import PromptBuilder
from ..prompting.context import HistoryEntry
from ..prompting.memory import ExperienceMemory, episodes_from_state, episodes_state
from ..storage.runlog import Logger
from .counters import Counters, rollouts_from_state
from .environment import initial_table
from .files import SCHEMA_KEY, SCHEMA_VERSION, RunDir
from .pace import CheckpointPace

__all__ = ["RunParts"]


class RunParts:
    """What one run holds, whatever its mode (see the module doc); :class:`~.services.Run` adds the services."""

    def __init__(self, cfg: TrainConfig, spec: EnvSpec, mode: Mode, run_dir: RunDir, console: Console,
                 recorded: RecordedCalls | None = None, resumed: bool = False, limiter: CallLimiter | None = None,
                 budget: Budget | None = None, record: dict[str, Any] | None = None) -> None:
        self.cfg, self.spec, self.mode, self.dir, self.console = cfg, spec, mode, run_dir, console
        self.t_start = time.perf_counter()
        self.observation = spec.observation_discretizer()
        self.actions = spec.action_discretizer()
        self.plan = SeedPlan(cfg.seed)
        self.collector = Collector(spec)
        self.memory = ExperienceMemory(self.observation.n_states, self.actions.n_actions, cfg.memory_capacity,
                                       cfg.evidence_gamma, cfg.best_k)
        self.keeper = Keeper(self.collector, initial_table(cfg, spec), cfg.seed,
                             cfg.test_start, cfg.test_max, cfg.test_rise_every, cfg.confirm_episodes, cfg.confirm_z,
                             cfg.confirm_batches, fresh_test_seeds=cfg.test_seeds == "fresh")
        self.builder = PromptBuilder(max_chars=cfg.max_prompt_chars, evidence=cfg.evidence)
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.history: list[HistoryEntry] = []
        self.pending: list[Episode] = []
        """The episodes counted since the last proposal: the next prompt context's ``fresh`` (none kept for a mode
        that never proposes)."""
        self._keeps_pending = proposes(mode)
        self.counters = Counters()
        self.best_heldout: Rollouts | None = None
        self.replaced_heldout: Rollouts | None = None
        """The held-out measurement of the table the last adoption replaced (logged with that adoption)."""
        self.wall_before = 0.0
        """Wall seconds spent by earlier processes of this run (resume)."""
        self.mode_facts = mode.prepare(Setup(cfg, spec, self.observation, self.actions, self.log, record), resumed)
        self.transcript = Transcript(self.dir.transcripts, {
            SCHEMA_KEY: SCHEMA_VERSION, "env_id": spec.env_id, "n_states": self.observation.n_states,
            "n_actions": self.actions.n_actions,
            "mode": mode.name, "format": self.mode_facts.get("output_format", ""),
        })
        self._local_usage = Usage()
        """Calls of a non-LLM proposer (free; counted so that runs compare call for call)."""
        self._shared_budget = budget is not None
        self.backend: Backend | None = None
        """The proposer every proposing mode asks, and an LLM client's session; None for a mode without a backend."""
        self.endpoint: str | None = None
        """Where the calls go and where its base URL and key came from (said before the first call)."""
        method = method_of(mode, cfg)
        self.backend_name, self.model, self.is_llm = method.name, method.model, method.is_llm
        """The backend's registry name, its model and whether it is a language model; for a mode without a
        backend, the method's name with its model (``lm-policy(SmolLM2-135M-Instruct.Q4_1)``)."""
        if needs_backend(mode):
            self.backend = make_backend(cfg, mode.needs_session, mode.name, self.transcript, self.builder, self.log,
                                        recorded=recorded, limiter=limiter, budget=budget, chat=uses_chat(mode),
                                        first=self.first_messages)
            self.backend_name, self.model, self.is_llm = self.backend.name, self.backend.model, self.backend.is_llm
            self.endpoint = self.backend.endpoint
        self.logger = Logger([])
        """Where each iteration's record goes: ``events.jsonl``, the console and ``--log``'s writers, from
        :meth:`~.services.Run.open_log` on (opening them writes files: a resume opens them once it is sure to go on)."""
        self.committed: dict[str, Any] | None = None
        """The state of the last checkpoint written (the iterations the run directory keeps). Only its iteration, its
        keeper and its held-out measurement are read again; its other arrays may be a component's live ones."""
        self.events_size_committed: int | None = None
        """``events.jsonl``'s size when :attr:`committed` was written (None: no such file then): a write that fails
        cuts the file back to it."""
        self.pace = CheckpointPace()
        """When ``checkpoint.npz`` is written, and the copy of a finished iteration's state whose checkpoint waits."""

    def first_messages(self) -> list[Message] | None:
        """The mode's first messages, with which the backend checks a model's context (:class:`~.services.Run`
        gives the mode's; the parts alone have none)."""
        return None

    def published(self) -> None:
        """The run directory was renamed into place (:meth:`~.files.RunDir.publish`): the transcript follows it."""
        self.transcript.path = self.dir.transcripts

    # ------------------------------------------------------------------ backend
    @property
    def session(self) -> LLMSession | None:
        """The LLM session (None for the non-LLM proposers and for a mode without a backend)."""
        return self.backend.session if self.backend is not None else None

    @property
    def usage(self) -> Usage:
        return self.session.usage if self.session is not None else self._local_usage

    def describe_backend(self) -> dict[str, Any]:
        """config.json's ``backend``: the backend's description, or the method's for a mode without one."""
        if self.backend is not None:
            return self.backend.describe()
        return {"method": self.backend_name, "model": self.model, "is_llm": self.is_llm,
                "note": f"no backend: --mode {self.mode.name} proposes nothing"}

    # ------------------------------------------------------------------ the kept table, read only
    @property
    def best_table(self) -> np.ndarray:
        return self.keeper.best_table

    @property
    def best_source(self) -> dict[str, Any] | None:
        return self.keeper.best_source

    @property
    def best_iteration(self) -> int:
        return self.keeper.best_iteration

    @property
    def iteration(self) -> int:
        """The last finished iteration."""
        return self.counters.iteration

    @property
    def episodes_total(self) -> int:
        return self.counters.episodes_total

    # ------------------------------------------------------------------ what every service shares: the counting
    def log(self, text: str) -> None:
        self.console.notice(text)

    def _count(self, episodes: list[Episode], selection: bool = False) -> None:
        """Count ``episodes`` (``selection``: played to choose the reported policy, not to learn)."""
        self.memory.add(episodes)
        if self._keeps_pending:
            self.pending.extend(episodes)
        self.counters.count(len(episodes), sum(e.length for e in episodes), selection)

    def train_seeds(self, n: int | None = None) -> list[int]:
        n = self.cfg.train_episodes if n is None else n
        seeds = [self.plan.train(self.counters.train_counter + j) for j in range(n)]
        self.counters.train_counter += n
        return seeds

    @property
    def heldout_mean(self) -> float | None:
        return self.best_heldout.mean if self.best_heldout is not None else None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The parts' state in the checkpoint: the counters, the random streams, the memory, the keeper and the
        backend's (:class:`~.services.Run` adds the mode's and its learner's)."""
        held = self.best_heldout
        return {
            **self.counters.to_state(),
            "wall_s": self.wall_before + time.perf_counter() - self.t_start,
            "heldout": None if held is None else {"seeds": held.seeds, "returns": held.returns,
                                                  "lengths": held.lengths},
            "history": [h.to_dict() for h in self.history],
            "pending": episodes_state(self.pending),
            "rng": self.rng.bit_generator.state,
            "memory": self.memory.state_dict(),
            "keeper": self.keeper.state_dict(),
            "proposer": self.backend.proposer.state_dict() if self.backend is not None else {},
            "session": self.session.state_dict() if self.session is not None else {},
            "usage": self.usage.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counters = Counters.from_state(state)
        self.wall_before = float(state["wall_s"])
        self.best_heldout = rollouts_from_state(state["heldout"])
        self.history = [HistoryEntry.from_dict(h) for h in state["history"]]
        self.pending = episodes_from_state(state["pending"]) if self._keeps_pending else []  # older checkpoints
        self.rng.bit_generator.state = state["rng"]
        self.memory.load_state_dict(state["memory"])
        self.keeper.load_state_dict(state["keeper"])
        if self.backend is not None:  # a mode without one: an older checkpoint's stand-in proposer is not read
            self.backend.proposer.load_state_dict(state["proposer"])
        if self.session is not None:
            self.session.load_state_dict(state["session"], restore_budget=not self._shared_budget)
        else:
            self._local_usage = Usage.from_dict(state["usage"])
