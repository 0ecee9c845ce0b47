"""The services a mode may use (:class:`~llm_policy_gen.modes.base.RunServices`), over one run's parts.

:class:`Run` adds to the parts a run owns (:class:`~.parts.RunParts`: the environment's discretizers, the collector,
the experience memory, the keeper, the backend, the counters and the run directory) what a mode may do with them:
every episode a service plays is counted by the service itself, so no mode can forget to count, and no mode touches
the keeper or the collector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..clients.base import Message
from ..clients.session import Answer
from ..collect import Episode, Rollouts
from ..formats.base import AnswerFormat, Target
from ..keeper import Verdict
from ..modes.base import Learner, OwnLoop, Step, first_messages
from ..modes.selection import KEEPER, NONE, heldout_due, select_choices, select_of
from ..policy import Policy, TablePolicy
from ..prompting.context import PromptContext
from ..schema.aliases import event_out
from ..storage.runlog import JsonlWriter, Logger, cut_back
from .environment import start_text
from .files import event_line
from .learner_env import LearnerEnv
from .parts import RunParts

__all__ = ["Run"]


class Run(RunParts):
    """One run: its parts and the services a mode may use (implements ``RunServices``)."""

    learner: Learner | None = None
    """An :class:`~llm_policy_gen.modes.base.OwnLoop` mode's learner (built by :meth:`mode_start` or
    :meth:`load_state_dict`), whose state the checkpoint holds beside the run's."""
    _learner_env: LearnerEnv | None = None

    def first_messages(self) -> list[Message] | None:
        return first_messages(self.mode, self)

    def open_log(self) -> None:
        """The iteration writers: ``events.jsonl``, the console and those of ``--log`` (csv, tensorboard)."""
        from ..loggers.writers import make_writers

        self.logger = Logger([JsonlWriter(self.dir.events, event_line), self.console,
                              *make_writers(self.cfg.log, self.dir.path)])

    # ------------------------------------------------------------------ services for modes
    @property
    def selects(self) -> bool:
        """Whether the keeper's test and confirmation episodes choose the reported table (``--select keeper``)."""
        return select_of(self.mode, self.cfg) == KEEPER

    def start_from_initial(self) -> list[Episode]:
        """A table mode's start: the initial table scored on the first test seeds (none with ``--select none``) and
        measured on the held-out seeds, ``best_policy.json`` written; returns the scoring episodes."""
        first: list[Episode] = []
        if self.selects:
            _, first = self.keeper.score_best(1)
            self._count(first, selection=True)
        self.measure_best(0)
        self.save_best()
        assert self.best_heldout is not None
        self.log(start_text(self.cfg, self.spec, self.actions, self.best_heldout.mean,
                            int(self.best_heldout.returns.size)))
        return first

    def score_best(self, iteration: int) -> float | None:
        """The kept table's test mean at ``iteration`` (its missing test episodes played and counted); None with
        ``--select none`` (nothing played)."""
        if not self.selects:
            return None
        best_mean, extra = self.keeper.score_best(iteration)
        self._count(extra, selection=True)
        return best_mean

    def train_episodes(self, policy: Policy | np.ndarray, iteration: int, epsilon: float = 0.0,
                       n: int | None = None) -> list[Episode]:
        episodes = self.collector.collect(policy, self.train_seeds(n), epsilon, self.rng, iteration)
        self._count(episodes)
        return episodes

    def select_episodes(self, policy: Policy, iteration: int, n: int) -> list[Episode]:
        """``n`` counted episodes of ``policy`` on the next training seeds that choose the reported policy (a peer's
        evaluation), counted as selection episodes."""
        episodes = self.collector.collect(policy, self.train_seeds(n), iteration=iteration)
        self._count(episodes, selection=True)
        return episodes

    def train_on(self, policy: Policy, seeds: Sequence[int], iteration: int,
                 each: Callable[[Episode], object]) -> list[Episode]:
        """One episode per seed (seeds from :meth:`train_seeds`), ``each`` called after every episode (a learner
        learning as it goes); the episodes are counted together at the end."""
        episodes = []
        for s in seeds:
            ep = self.collector.collect(policy, [s], iteration=iteration)[0]
            each(ep)
            episodes.append(ep)
        self._count(episodes)
        return episodes

    # ------------------------------------------------------------------ a mode's own loop (modes.base.OwnLoop)
    @property
    def learner_env(self) -> LearnerEnv:
        if self._learner_env is None:
            self._learner_env = LearnerEnv(self.spec, lambda: self.train_seeds(1)[0], self._count_own)
        return self._learner_env

    def _count_own(self, episode: Episode) -> Episode:
        """An own-loop episode as it ends: stamped with the iteration under way, and counted."""
        episode.iteration = self.counters.iteration + 1
        self._count([episode])
        return episode

    def _build_learner(self) -> None:
        if self.learner is None and isinstance(self.mode, OwnLoop):
            self.learner = self.mode.build_learner(self)

    def update_learner(self, iteration: int) -> Step:
        if self.learner is None:
            raise TypeError(f"mode {self.mode.name} has no learner of its own (it declares no build_learner)")
        self.learner.update()
        episodes = self.learner_env.take()
        if not self.selects:  # the read-out table is the run's policy, unjudged
            measured = self.report_table(self.learner.table(), iteration)
            return Step(episodes, None, [], None, False, fields={"candidates": 1, "heldout_iteration": measured})
        verdict = self.judge([self.learner.table()], iteration)
        return Step(episodes, None, [], verdict, verdict.accepted, fields={"candidates": 1})

    def context(self, iteration: int, fmt: AnswerFormat[Any], target: Target, current: np.ndarray,
                best_mean: float | None, **kw: Any) -> PromptContext:
        return PromptContext(
            spec=self.spec, observation=self.observation, actions=self.actions, iteration=iteration,
            current_table=current, best_test_mean=best_mean, test_episodes=self.keeper.n_test(iteration),
            memory=self.memory, evidence=self.memory.evidence(), fmt=fmt, target=target,
            history=list(self.history), best_k=self.cfg.best_k, worst_k=self.cfg.worst_k, seed=self.cfg.seed,
            candidates=self.cfg.candidates, mode=self.mode.name, fresh=list(self.pending), **kw,
        )

    def propose(self, ctx: PromptContext, k: int) -> list[Answer[Any]]:
        messages = self.builder.build(ctx)
        self.counters.prompt_sizes.append(sum(len(m.content) for m in messages))
        if self.backend is None:
            raise TypeError(f"mode {self.mode.name} proposes nothing: the run has no backend to ask")
        answers = self.backend.proposer.propose(ctx, messages, k)
        if self.session is None:
            for a in answers:
                self._local_usage.add(a.usage)
        self.pending = []
        return answers

    def judge(self, tables: list[np.ndarray | None], iteration: int,
              sources: list[dict[str, Any] | None] | None = None) -> Verdict:
        """The keeper's verdict (its episodes counted); what the run keeps of it is :meth:`keep_verdict`'s."""
        verdict = self.keeper.judge(tables, iteration, sources)
        self._count(verdict.episodes, selection=True)
        return verdict

    def keep_verdict(self, verdict: Verdict, iteration: int) -> None:
        """What the run keeps of a mode's verdict, once its iteration returned: the challenger (or, with no valid
        candidate, the kept table) as ``policies/iter_NNNN.json``; on adoption the new best measured on the
        held-out seeds (reported, never used to decide) and saved as ``best_policy.json``."""
        meta: dict[str, Any] = {"iteration": iteration, "candidate_means": verdict.test_means,
                                "accepted": verdict.accepted}
        if verdict.chosen is not None and verdict.chosen_table is not None:
            k = verdict.chosen
            meta.update(candidate=k + 1, test_mean=verdict.test_means[k], test_returns=verdict.test_returns[k])
            self.save_policy(iteration, verdict.chosen_table, meta, verdict.chosen_source)
        else:  # no valid candidate: the kept table stands
            meta.update(candidate=None)
            self.save_policy(iteration, self.keeper.best_table, meta,
                             self.keeper.best_source)
        if verdict.accepted:
            self.measure_best(iteration)
            self.save_best({"test_mean": verdict.chosen_mean})

    def policy_of(self, table: np.ndarray, meta: dict[str, Any], source: dict[str, Any] | None = None) -> TablePolicy:
        """``table`` as this run's policy (checked against the spec: a :class:`SpecError` if it does not fit)."""
        return TablePolicy(self.spec.env_id, self.observation, self.actions, np.asarray(table), meta,
                           dict(self.spec.kwargs), source)

    def save_policy(self, iteration: int | None, table: np.ndarray, meta: dict[str, Any],
                    source: dict[str, Any] | None = None) -> None:
        path = self.dir.best_policy if iteration is None else self.dir.policy_file(iteration)
        self.policy_of(table, event_out(meta), source).save(path)

    def save_network_policy(self, facts: dict[str, Any], weights: bytes) -> None:
        """A policy that is a network (``--mode peer``): its facts as JSON and its tensors as safetensors bytes, the
        files ``evaluate`` reads (weights first: the facts name a network whose weights are there)."""
        import hashlib

        from ..storage.runlog import write_bytes_atomic, write_json_atomic

        facts_path, weights_path = self.dir.network_policy
        write_bytes_atomic(weights_path, weights)
        write_json_atomic(facts_path, {"env_id": self.spec.env_id, "env_kwargs": dict(self.spec.kwargs), **facts,
                                       "weights_sha256": hashlib.sha256(weights).hexdigest()})

    def save_best(self, meta: dict[str, Any] | None = None) -> None:
        adopted = [h.test_mean for h in self.history if h.iteration == self.keeper.best_iteration and h.accepted]
        self.save_policy(None, self.keeper.best_table,
                         {"iteration": self.keeper.best_iteration, "heldout_mean": self.heldout_mean,
                          "heldout_seeds": [self.plan.heldout(0), self.plan.heldout(self.cfg.heldout_episodes - 1)],
                          **({"test_mean": adopted[0]} if adopted else {}), **(meta or {})}, self.keeper.best_source)

    def measure_best(self, iteration: int) -> None:
        """The kept table on the held-out seeds: reported, never used to decide."""
        self.replaced_heldout = self.best_heldout
        self.measure_heldout(self.keeper.best_table, iteration)

    def report_table(self, table: np.ndarray, iteration: int, *, now: bool = False) -> int | None:
        """``--select none``: the learner's read-out ``table`` after ``iteration``, written as the iteration's policy;
        when the held-out curve is due (:func:`~llm_policy_gen.modes.selection.heldout_due`, or ``now``) it becomes
        the reported table, measured on the held-out seeds and saved as ``best_policy.json``. Returns the iteration
        whose table the held-out figure now measures (None: not measured now)."""
        self.save_policy(iteration, table, {"iteration": iteration, "select": NONE})
        if not (now or heldout_due(iteration, self.cfg.iterations)):
            return None
        self.keeper.adopt(table, iteration)
        self.measure_best(iteration)
        self.save_best()
        return iteration

    def report_final(self) -> dict[str, Any]:
        """At the run's end: the final policy's held-out measurement, for the summary (:mod:`..modes.selection`):
        ``--select none`` measures the last read-out table if the curve has not (after ``--iterations 0``: the
        read-out before any update); a learner whose table the keeper judged measures its last read-out beside the
        kept one (never counted); and the learner's steps of episodes
        still in progress (taken, learned from, counted only once their episodes end: ``steps_in_progress``)."""
        if self.learner is None:
            return {}
        out: dict[str, Any] = {"steps_in_progress": self.learner_env.steps_in_progress}
        if KEEPER not in select_choices(self.mode) or not (self.iteration or self.cfg.iterations == 0):
            return out
        table = np.asarray(self.learner.table(), dtype=np.int64)
        if not self.selects:
            if not np.array_equal(table, self.keeper.best_table) or self.keeper.best_iteration != self.iteration:
                self.report_table(table, self.iteration, now=True)
            return out
        if np.array_equal(table, self.keeper.best_table) and self.best_heldout is not None:
            final = self.best_heldout
        else:
            final = self.heldout_of(table)
        return {**out, "final_heldout_mean": final.mean, "final_heldout_std": float(np.std(final.returns))}

    def heldout_of(self, policy: Policy | np.ndarray) -> Rollouts:
        """``policy`` on the held-out seeds, reported only (not kept as the run's measurement, never counted)."""
        seeds = [self.plan.heldout(j) for j in range(self.cfg.heldout_episodes)]
        self.counters.heldout_total += len(seeds)
        return self.collector.evaluate(policy, seeds)

    def measure_heldout(self, policy: Policy | np.ndarray, iteration: int) -> Rollouts:
        """``policy`` on the held-out seeds, kept as the run's best measurement (a mode whose policy is not the
        keeper's table, as direct mode's at its end); reported, never used to decide."""
        seeds = [self.plan.heldout(j) for j in range(self.cfg.heldout_episodes)]
        self.best_heldout = self.collector.evaluate(policy, seeds)
        self.counters.heldout_total += len(seeds)
        threshold = self.spec.reward_threshold
        c = self.counters
        if c.solved_at is None and threshold is not None and self.best_heldout.mean >= threshold:
            c.solved_at, c.solved_iteration = c.episodes_total, iteration
        return self.best_heldout

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything the checkpoint holds: the parts' state (:meth:`.RunParts.state_dict`), the mode's, and an
        own-loop mode's learner with its environment's episode in progress."""
        return {
            **super().state_dict(),
            "mode": self.mode.state_dict(),
            **({} if self.learner is None else
               {"learner": {"env": self.learner_env.state_dict(), "state": self.learner.state_dict()}}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._build_learner()
        if self.learner is not None and "learner" in state:  # the episode in progress first: the learner's state
            # names its last state (a q-learning checkpoint from before its own loop has none: its Q is the mode's)
            self.learner_env.load_state_dict(state["learner"]["env"])
            self.learner.load_state_dict(state["learner"]["state"])
        self.mode.load_state_dict(state["mode"])

    def mode_start(self) -> None:
        """A new run's start (the mode's, e.g. scoring the initial table), then checkpoint 0."""
        self._build_learner()
        self.mode.start(self)
        self.checkpoint(now=True)

    def checkpoint(self, *, now: bool = False) -> None:
        """The state after a finished iteration: written to ``checkpoint.npz`` now, or, when its pace says so
        (:mod:`.pace`; never with ``now``), kept as a copy until :meth:`flush_checkpoint`."""
        state = self.state_dict()
        if now or self.pace.due():
            self._write_checkpoint(state)
        else:
            self.pace.hold(state)

    def flush_checkpoint(self) -> None:
        """Write the checkpoint that waits, if any. A write that fails (here or in :meth:`checkpoint`) cuts
        ``events.jsonl`` back to the last checkpoint written, drops the waiting one and raises: the files agree on
        the iterations kept."""
        if self.pace.waiting is not None:
            self._write_checkpoint(self.pace.waiting)

    def mark_committed(self, state: dict[str, Any]) -> None:
        """``state`` is the checkpoint on disk (a resume, once the run's files are cut back to it)."""
        self.committed = state
        self.events_size_committed = self.dir.events.stat().st_size if self.dir.events.exists() else None

    def _write_checkpoint(self, state: dict[str, Any]) -> None:
        from .checkpoint import save_checkpoint

        started = self.pace.started()
        try:
            save_checkpoint(self.dir.checkpoint, state)
        except BaseException:  # the files go back to the last checkpoint written, the waiting one dropped
            self.pace.drop()
            cut_back(self.dir.events, self.events_size_committed)
            raise
        self.pace.wrote(started, self.dir.checkpoint.stat().st_size, state)
        self.mark_committed(state)
