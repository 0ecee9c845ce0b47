"""The seam between the engine and a mode: what a mode may ask of a run, and what it reports back.

A :class:`Mode` decides what a candidate is, how it becomes a policy and how it is judged; the engine
(:mod:`llm_policy_gen.run`) owns everything else: the iteration loop, the stops (iterations, ``--max-episodes``,
budget, patience, an unreachable backend), the counters, events, checkpoints and the summary. A mode reaches the
run only through :class:`RunServices`, so a new mode is one file plus one registry line and never imports the
engine. A mode whose learner steps its environment itself (a library learner) declares :class:`OwnLoop`; the run
then owns that learner's environment, counts its episodes, judges its read-out table and checkpoints its state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import gymnasium as gym

    from ..clients.base import Message
    from ..clients.session import Answer, LLMSession
    from ..collect import Episode, Rollouts
    from ..config import TrainConfig
    from ..discretize import ActionDiscretizer, ObservationDiscretizer
    from ..envs.spec import EnvSpec
    from ..formats.base import AnswerFormat, Target
    from ..keeper import Verdict
    from ..policy import Policy
    from ..prompting.builder import PromptBuilder, PromptContext
    from ..storage.sizes import Need

__all__ = ["Setup", "RunServices", "Step", "Mode", "ModeBase", "Method", "Learner", "OwnLoop",
           "stopped_before_any_answer", "first_stop", "uses_chat", "proposes", "needs_backend", "method_of",
           "tables_per_iteration", "first_messages", "memory_needs"]


@dataclass(frozen=True)
class Setup:
    """What a mode may read before the run is built (:meth:`Mode.prepare`)."""

    cfg: TrainConfig
    spec: EnvSpec
    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    notice: Callable[[str], None] = field(default=lambda text: None)
    """Where a one-line note goes (the run's console): something the mode worked around, such as a damaged cache,
    and what a slow step of the preparation is doing (a model's load, the encoding of the state texts)."""
    record: dict[str, Any] | None = None
    """``train --resume``: the run's ``config.json`` as recorded (its settings and the mode's facts), which a mode
    may check the resume against (the lm-policy mode: its model's sha256); None for a new run."""


class RunServices(Protocol):
    """What the run offers a mode. Every episode a service plays is counted by the service (memory, totals, the
    next prompt's fresh episodes); the keeper and the collector stay the run's."""

    cfg: TrainConfig
    spec: EnvSpec
    observation: ObservationDiscretizer
    actions: ActionDiscretizer
    builder: PromptBuilder

    @property
    def iteration(self) -> int:
        """The last finished iteration."""
        ...

    @property
    def session(self) -> LLMSession | None:
        """The LLM session (None for the non-LLM proposers)."""
        ...

    @property
    def best_table(self) -> np.ndarray:
        """The kept table."""
        ...

    @property
    def best_source(self) -> dict[str, Any] | None:
        """The kept table's source (the rules it compiles from), if any."""
        ...

    @property
    def best_iteration(self) -> int:
        """The iteration that adopted the kept table (0: the initial table)."""
        ...

    def log(self, text: str) -> None:
        """One line for the console."""
        ...

    def start_from_initial(self) -> list[Episode]:
        """A table mode's start: the initial table scored on the first test seeds and measured on the held-out seeds,
        ``best_policy.json`` written; returns the scoring episodes."""
        ...

    def score_best(self, iteration: int) -> float | None:
        """The kept table's test mean at ``iteration`` (its missing test episodes played and counted)."""
        ...

    def train_episodes(self, policy: Policy | np.ndarray, iteration: int, epsilon: float = 0.0,
                       n: int | None = None) -> list[Episode]:
        """``n`` (default ``train_episodes``) counted episodes on the next training seeds."""
        ...

    @property
    def learner_env(self) -> gym.Env[Any, Any]:
        """The environment an :class:`OwnLoop` mode's learner steps itself (one per run): observations are
        discretized state indices, actions the spec's action indices; every reset takes the run's next training
        seed and every finished episode is counted by the run as it ends (memory, totals, the next prompt's fresh
        episodes). Its episode in progress is part of the run's checkpoint."""
        ...

    def update_learner(self, iteration: int) -> Step:
        """One update of the :class:`OwnLoop` mode's learner (its own environment steps, counted), then its read-out
        table judged by the keeper as the iteration's one candidate; the mode may add event fields to the step."""
        ...

    def train_seeds(self, n: int | None = None) -> list[int]:
        """Reserve the next ``n`` (default ``train_episodes``) training seeds, for a mode that runs several
        candidates on the same seeds (:meth:`train_on`)."""
        ...

    def select_episodes(self, policy: Policy, iteration: int, n: int) -> list[Episode]:
        """``n`` episodes of ``policy`` on the next training seeds that choose the reported policy (a peer's
        evaluation), counted as selection episodes."""
        ...

    def heldout_of(self, policy: Policy | np.ndarray) -> Rollouts:
        """``policy`` on the held-out seeds, reported only (not the run's measurement; never counted)."""
        ...

    def train_on(self, policy: Policy, seeds: Sequence[int], iteration: int,
                 each: Callable[[Episode], object]) -> list[Episode]:
        """One episode per seed, ``each`` called after every episode (a learner learning as it goes); the episodes
        are counted together at the end."""
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
        """The keeper's verdict on candidate tables (its episodes counted). Only a verdict: what the run keeps of it
        (the iteration's policy file, and on adoption the new best measured on the held-out seeds and saved) the run
        does after the mode's iteration returns its :class:`Step`."""
        ...

    def save_policy(self, iteration: int | None, table: np.ndarray, meta: dict[str, Any],
                    source: dict[str, Any] | None = None) -> None:
        """Write a policy file into the run directory: the iteration's, or with None the best policy's."""
        ...

    def save_network_policy(self, facts: dict[str, Any], weights: bytes) -> None:
        """Write a policy that is a network (a peer's: its facts as JSON, its tensors as safetensors bytes) into the
        run directory, where ``evaluate`` reads it."""
        ...

    def measure_heldout(self, policy: Policy | np.ndarray, iteration: int) -> Rollouts:
        """``policy`` on the held-out seeds, kept as the run's best measurement (reported, never used to decide), for
        a mode whose policy is not the keeper's table."""
        ...


@dataclass
class Step:
    """What one iteration of a mode did, for the engine to log, count and judge."""

    train_episodes: list[Episode] = field(default_factory=list)
    train_epsilon: float | None = None
    answers: list[Answer[Any]] = field(default_factory=list)
    verdict: Verdict | None = None
    accepted: bool = False
    test_mean: float | None = None
    """The chosen candidate's test mean (defaults to the verdict's)."""
    test_returns: list[float] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    """Extra fields of the iteration's events.jsonl line."""
    stop: str | None = None
    """Why the run must end after this iteration ('budget reached', 'replay exhausted ...')."""
    skipped: bool = False
    """True when the iteration did nothing worth recording (every call stopped before any answer)."""


def stopped_before_any_answer(answers: list[Answer[Any]]) -> Step | None:
    """The step of an iteration whose every call stopped (a budget reached, a replay run out) before any answer,
    failure or error: nothing to judge or record, and the run ends. None when there is something to judge."""
    stops = [a.stop for a in answers if a.stop]
    if stops and not any(a.ok or a.failed or a.errors for a in answers):
        return Step([], None, answers, stop=stops[0], skipped=True)
    return None


def first_stop(answers: list[Answer[Any]]) -> str | None:
    """Why the run must end after this iteration, if a call said so."""
    return next((a.stop for a in answers if a.stop), None)


@runtime_checkable
class Mode(Protocol):
    """What a candidate is and how it is judged."""

    name: str
    needs_session: bool
    """True for modes that ask the model directly (direct mode); the non-LLM proposers cannot serve them."""
    judges_candidates: bool
    """True for modes whose keeper judges candidate tables (the run notes when none was ever accepted)."""

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        """Called once, before the run's backend is built (``resumed``: state comes from a checkpoint next);
        returns facts for config.json (the answer format, ...)."""
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


@dataclass(frozen=True)
class Method:
    """What a run without a backend is called where a backend would be named (the console line, the run directory's
    default name, the summary's ``backend``/``model``/``is_llm`` and the report's header)."""

    name: str
    """The method and its model: ``lm-policy(SmolLM2-135M-Instruct.Q4_1)``, ``lm-policy(onehot)``, ``q-learning``."""
    model: str = ""
    """The model the method runs (its path as given), empty for none."""
    is_llm: bool = False
    """Whether a language model is part of the method (it is called by no backend, so its calls cost nothing)."""


class ModeBase:
    """The small base class of the package's modes: what a mode needs of a run, as typed class attributes, so that
    the run builds only those parts (a mode that proposes nothing gets no backend). A plug-in mode may implement
    :class:`Mode` without it; it then needs everything (a backend, a prompt) as the table modes do."""

    name: ClassVar[str]
    needs_backend: ClassVar[bool] = True
    """False for a mode that proposes nothing (``q-learning``, ``lm-policy``): the run builds no backend (no
    session, no proposer) and names the run by :meth:`method` instead."""
    needs_session: ClassVar[bool] = False
    """True for modes that ask the model directly (direct mode); the non-LLM proposers cannot serve them."""
    proposes: ClassVar[bool] = True
    """Whether the mode asks its backend for candidates (:func:`proposes`; never without a backend)."""
    uses_chat: ClassVar[bool] = True
    """Whether the mode sends chat messages to a model (:func:`uses_chat`)."""
    judges_candidates: ClassVar[bool] = True
    """True for modes whose keeper judges candidate tables (the run notes when none was ever accepted)."""
    candidates_per_iteration: ClassVar[int | None] = None
    """The tables the keeper judges per iteration; None: ``--candidates``."""
    backend_spelling: ClassVar[str | None] = None
    """A mode without a backend: the ``backend`` its configuration records, as its runs recorded it before (older
    commands, run directories and comparisons name it: ``q-learning``: ``q-learning``; ``lm-policy``: ``offline``), and
    the one ``--backend`` it accepts. Read where the configuration is built (:class:`~llm_policy_gen.config.
    TrainConfig`); no backend of that name is built."""

    selects: ClassVar[tuple[str, ...]] = ("keeper",)
    """The ``--select`` values the mode takes, its default first (:mod:`.selection`): a learner whose read-out table
    the keeper judges (``q-learning``, ``lm-policy``) takes ``none`` too."""

    def counting(self, cfg: TrainConfig) -> str:
        """What the run's counted interaction informs, in words (``summary.json``'s ``counting``)."""
        return ("every counted episode informs the kept table: training episodes (the proposals' evidence), and the "
                "keeper's test and confirmation episodes, which choose it")

    def method(self, cfg: TrainConfig) -> Method:
        """This run's name where a backend would be named (a mode without a backend: :attr:`needs_backend`)."""
        return Method(self.name)

    def first_messages(self, run: RunServices) -> list[Message] | None:
        """The messages of the mode's first call with nothing learned yet (:func:`first_messages`); None: no call."""
        return None

    def memory(self, cfg: TrainConfig, n_states: int, n_actions: int) -> Sequence[Need]:
        """What the mode's own arrays take at least (:func:`memory_needs`); none by default."""
        return ()


def needs_backend(mode: Mode) -> bool:
    """Whether the run builds a backend for ``mode`` (:attr:`ModeBase.needs_backend`; a plug-in mode without the
    base class needs one)."""
    return not isinstance(mode, ModeBase) or mode.needs_backend


def method_of(mode: Mode, cfg: TrainConfig) -> Method:
    """``mode``'s name where a backend would be named (:meth:`ModeBase.method`)."""
    return mode.method(cfg) if isinstance(mode, ModeBase) else Method(mode.name)


def tables_per_iteration(mode: Mode, cfg: TrainConfig) -> int:
    """How many tables the keeper judges per iteration of ``mode`` (``--candidates`` unless the mode says)."""
    fixed = mode.candidates_per_iteration if isinstance(mode, ModeBase) else None
    return cfg.candidates if fixed is None else fixed


class Learner(Protocol):
    """A learner that runs its own loop (an SB3 algorithm; ``tests/test_own_loop.py``'s tiny one): it steps
    :attr:`RunServices.learner_env` itself and keeps its own state."""

    def update(self) -> None:
        """One update: the learner's own environment steps and what it learns from them."""
        ...

    def table(self) -> np.ndarray:
        """The read-out table: one action index per discretized state (what the keeper judges)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything that decides the next update (parameters, optimiser moments, random states, counters), as
        numpy arrays, numbers, strings, lists and dicts: the run's checkpoint holds it, never a pickle."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Back to ``state``; a state that does not fit raises ``ValueError`` (the resume is refused)."""
        ...


@runtime_checkable
class OwnLoop(Protocol):
    """What a mode whose learner runs its own environment steps declares (``lm-policy``, ``q-learning``). The run
    builds the learner once, over :attr:`RunServices.learner_env`: before :meth:`Mode.start` in a new run, before the
    checkpoint's state is loaded in a resumed one. The run then owns it: :meth:`RunServices.update_learner` runs one
    update and judges its read-out table, and the learner's state (with the episode in progress) is written into
    ``checkpoint.npz`` with the run's, atomically, after every iteration (a state over 32 MiB at a pace:
    :mod:`llm_policy_gen.run.pace`), and loaded back on ``--resume``."""

    def build_learner(self, run: RunServices) -> Learner:
        """The mode's learner, stepping ``run.learner_env``."""
        ...


def proposes(mode: Mode) -> bool:
    """Whether ``mode`` ever asks its backend for candidates (:meth:`RunServices.propose`), whose prompt context
    carries the episodes counted since the previous call (``fresh``). An optional attribute ``proposes`` of the mode
    says otherwise, as does a mode without a backend (``q-learning``, ``lm-policy``): the run keeps no such episodes
    for it (they grew with every episode of the run, in memory and in every checkpoint)."""
    if isinstance(mode, ModeBase):
        return mode.proposes and mode.needs_backend
    return bool(getattr(mode, "proposes", True))


def uses_chat(mode: Mode) -> bool:
    """Whether ``mode`` sends chat messages to a model (every mode here does). An optional attribute ``uses_chat``
    of the mode says otherwise: a mode that reads a model's token probabilities needs no chat template, so the
    backend factory does not ask the model for one."""
    return mode.uses_chat if isinstance(mode, ModeBase) else bool(getattr(mode, "uses_chat", True))


def first_messages(mode: Mode, run: RunServices) -> list[Message] | None:
    """The messages of ``mode``'s first call with nothing learned yet (the part of every prompt that no cap can cut),
    from the mode's optional method ``first_messages(run)``; None for a mode without one. The run checks with them
    that a model's context can hold a prompt and an answer before the run starts."""
    if isinstance(mode, ModeBase):
        return mode.first_messages(run)
    hook = getattr(mode, "first_messages", None)  # a plug-in mode without the base class
    return hook(run) if callable(hook) else None


def memory_needs(mode: Mode, cfg: TrainConfig, n_states: int, n_actions: int) -> list[Need]:
    """What ``mode``'s own arrays take at least for a table of ``n_states`` x ``n_actions``
    (:mod:`llm_policy_gen.sizes`), from the mode's optional method ``memory(cfg, n_states, n_actions)`` (a language
    model's learner: its rollout buffer and head); none for a mode without one (its tables are counted by the run)."""
    if isinstance(mode, ModeBase):
        return list(mode.memory(cfg, n_states, n_actions))
    hook = getattr(mode, "memory", None)  # a plug-in mode without the base class
    return list(hook(cfg, n_states, n_actions)) if callable(hook) else []
