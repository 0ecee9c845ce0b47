"""``--mode direct``: the model picks each action (the seed project's other approach).

At a state's first visit the observation is written as text (the raw values of the observation, and the
discretized state's description) and the model is asked for one line ``Action: N`` (the ``action`` answer format,
plain text; templates ``prompting/prompts/direct_system.md`` and ``prompting/prompts/direct_user.md``). With
``--candidates K`` it is asked K times at once and the majority answer is taken (ties: the lowest action among
the most frequent).

**Calls are bounded.** The answer is kept per discretized state: a state is asked about once, and every later visit
reuses the answer, so a run makes at most ``K x n_states`` calls however many episodes it runs. The answers form a
table, saved as ``best_policy.json`` (states never asked hold the fallback action), so ``llm-policy-gen evaluate
RUN_DIR`` replays exactly what the model chose.

**Invalid answers.** No valid answer among the K samples, or a failed call, makes the state fall back to the spec's
``default_action``; the fallback is kept like an answer and counted (``invalid_answers``). There is no repair round:
that keeps the calls-per-state bound.

**Iterations.** There is no keeper: one iteration is a batch of ``train_episodes`` episodes (seeded from the
training range) with the model acting. ``test_mean`` and ``train_return`` of an iteration are both the batch's mean
return; ``best_test_mean`` is the best batch mean so far and ``accepted`` says the batch set it (the summary's
``best_iteration`` is the last iteration that did). At the end the policy runs ``heldout_episodes`` held-out
episodes, still asking the model about new states; their mean is the summary's ``best_heldout_mean``. Until then there
is no held-out figure: events say ``heldout_at_end: true`` with ``best_heldout_mean: null``, and the console shows
"held-out at the end". Held-out episodes are counted apart, as in table mode.

**Stopping.** When a ``replay:`` file runs out or the next call would pass ``--budget-usd``, no more calls are made:
unknown states take the fallback action (not kept, not counted as invalid), the iteration finishes and the run ends
cleanly; the held-out measure then uses the same rule, which is what ``best_policy.json`` holds.
"""

from __future__ import annotations

from collections import Counter
from string import Template
from typing import Any

import numpy as np

from ..clients.base import Message
from ..clients.session import Answer, LLMSession
from ..discretize import BoxDiscretizer
from ..envs.spec import EnvSpec
from ..formats import make_format
from ..formats.base import AnswerFormat, FormatContext, Target
from ..prompting.builder import PromptBuilder
from .base import ModeBase, RunServices, Setup, Step

__all__ = ["DirectMode", "DirectPolicy", "observation_text"]


def observation_text(spec: EnvSpec, obs: Any, state: int) -> str:
    """The raw observation as readable lines (named dimensions with units where the spec has them)."""
    disc = spec.observation_discretizer()
    if isinstance(disc, BoxDiscretizer):
        x = np.asarray(obs, dtype=np.float64).reshape(-1)
        lines = [f"{d.name} = {x[d.index]:.4g}{' ' + d.unit if d.unit else ''}" for d in disc.dims]
        used = set(int(i) for i in disc.indices)
        rest = [f"x[{i}] = {x[i]:.4g}" for i in range(x.size) if i not in used]
        if rest:
            lines.append("other observation values (not tabulated): " + ", ".join(rest))
        return "\n".join(lines)
    flat = np.asarray(obs).reshape(-1)
    shown = ", ".join(str(int(v)) for v in flat) if flat.size > 1 else str(int(flat[0]))
    return f"observation = {shown} ({disc.describe_state(state)})"


class DirectPolicy:
    """Acts by asking the session once per discretized state (K samples, majority vote) and keeping the answer."""

    def __init__(self, session: LLMSession, spec: EnvSpec, builder: PromptBuilder, k: int) -> None:
        self.session = session
        self.spec = spec
        self.builder = builder
        self.k = int(k)
        self.observation = spec.observation_discretizer()
        self.actions = spec.action_discretizer()
        self.fmt: AnswerFormat[int] = make_format("action")
        self.fctx = FormatContext(self.observation, self.actions, np.zeros(0, dtype=np.int64),
                                  Target("action", n_actions=self.actions.n_actions), spec)
        self.fallback = int(spec.default_action)
        self.answers: dict[int, int] = {}
        self.invalid = 0
        self.unasked_steps = 0
        self.errors: list[str] = []
        self.stop: str | None = None
        self.iteration = 0
        self.phase = "train"
        self.log: list[Answer[int]] = []
        """Answers of the current iteration (for the engine's unreachable check)."""

    def messages(self, obs: Any, state: int) -> list[Message]:
        b, spec = self.builder, self.spec
        fields = {
            **b.task_fields(spec, self.actions),
            "observation": observation_text(spec, obs, state),
            "state": state,
            "state_description": self.observation.describe_state(state),
            "max_action": self.actions.n_actions - 1,
            "format": self.fmt.prompt_section(self.fctx),
        }
        user = Template(b.template("direct_user.md")).safe_substitute(fields)
        return [Message("system", b.template("direct_system.md")), Message("user", user)]

    def table(self) -> np.ndarray:
        """The answers as a complete table (the fallback where no answer exists)."""
        t = np.full(self.observation.n_states, self.fallback, dtype=np.int64)
        for s, a in self.answers.items():
            t[s] = a
        return t

    def _ask(self, obs: Any, state: int) -> int:
        answers = self.session.sample(self.messages(obs, state), self.fmt, self.fctx, iteration=self.iteration,
                                      k=self.k, repair=self.builder.repair, state=state, repairs=0,
                                      record={"phase": self.phase})
        self.log.extend(answers)
        stops = [a.stop for a in answers if a.stop]
        votes = [a.parsed.value for a in answers if a.parsed is not None]
        if stops and not votes and not any(a.failed or a.errors for a in answers):
            self.stop = stops[0]
            self.unasked_steps += 1
            return self.fallback
        if stops:
            self.stop = stops[0]
        if not votes:
            self.answers[state] = self.fallback
            self.invalid += 1
            self.errors.extend(f"s{state}: {e}" for a in answers for e in a.errors)
            return self.fallback
        counts = Counter(votes)
        top = max(counts.values())
        self.answers[state] = min(a for a, c in counts.items() if c == top)
        return self.answers[state]

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Batch of raw observations -> actions (asking about states never seen before)."""
        batch = np.asarray(obs)
        if batch.ndim == 0 or (isinstance(self.observation, BoxDiscretizer) and batch.ndim == 1):
            batch = batch[None, ...]
        states = self.observation.encode(batch)
        out = np.empty(len(states), dtype=np.int64)
        for j, s in enumerate(states):
            s = int(s)
            if s in self.answers:
                out[j] = self.answers[s]
            elif self.stop is not None:
                self.unasked_steps += 1
                out[j] = self.fallback
            else:
                out[j] = self._ask(batch[j], s)
        return out

    def state_dict(self) -> dict[str, Any]:
        keys = sorted(self.answers)
        return {"states": np.asarray(keys, dtype=np.int64),
                "actions": np.asarray([self.answers[k] for k in keys], dtype=np.int64),
                "invalid": self.invalid, "unasked_steps": self.unasked_steps, "errors": list(self.errors),
                "stop": self.stop}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.answers = {int(s): int(a) for s, a in zip(state["states"], state["actions"], strict=True)}
        self.invalid = int(state["invalid"])
        self.unasked_steps = int(state["unasked_steps"])
        self.errors = list(state["errors"])
        self.stop = state["stop"]


class DirectMode(ModeBase):
    """The model acts; its answers are kept per state."""

    name = "direct"
    needs_session = True
    judges_candidates = False

    def __init__(self) -> None:
        self.policy: DirectPolicy | None = None
        self.best_batch: float | None = None
        self.best_iteration = 0
        """The iteration whose batch set ``best_batch``."""

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        return {"output_format": "action", "fallback_action": int(setup.spec.default_action),
                "fallback_rule": "spec default_action for invalid answers, failed calls and states left unasked"}

    def _policy(self, run: RunServices) -> DirectPolicy:
        if self.policy is None:
            assert run.session is not None
            self.policy = DirectPolicy(run.session, run.spec, run.builder, run.cfg.candidates)
            if self._pending_state is not None:
                self.policy.load_state_dict(self._pending_state)
        return self.policy

    _pending_state: dict[str, Any] | None = None

    def start(self, run: RunServices) -> None:
        self._policy(run)

    def iterate(self, run: RunServices, iteration: int) -> Step:
        policy = self._policy(run)
        policy.iteration, policy.phase, policy.log = iteration, "train", []
        before = (policy.invalid, len(policy.answers), len(policy.errors))
        episodes = run.train_episodes(policy, iteration, 0.0)
        returns = [e.ret for e in episodes]
        mean = float(np.mean(returns))
        accepted = self.best_batch is None or mean > self.best_batch
        if accepted:
            self.best_batch, self.best_iteration = mean, iteration
        run.save_policy(None, policy.table(), {"mode": "direct", "iteration": iteration,
                                                             "states_asked": len(policy.answers)})
        return Step(episodes, 0.0, list(policy.log), None, accepted, mean, returns, fields={
            "best_test_mean": self.best_batch,
            "candidates": run.cfg.candidates,
            "new_states": len(policy.answers) - before[1],
            "states_cached": len(policy.answers),
            "invalid_answers": policy.invalid - before[0],
            "invalid_total": policy.invalid,
            "validation_errors": policy.errors[before[2]:][:8],
            "test_episodes": len(episodes),
            "heldout_at_end": True,
        }, stop=policy.stop)

    def finish(self, run: RunServices) -> dict[str, Any]:
        policy = self._policy(run)
        policy.phase, policy.log = "heldout", []
        stopped_before = policy.stop
        held = run.measure_heldout(policy, run.iteration)
        run.save_policy(None, policy.table(), {
            "mode": "direct", "states_asked": sorted(policy.answers), "fallback_action": policy.fallback,
            "heldout_mean": held.mean})
        extra: dict[str, Any] = {
            "best_iteration": self.best_iteration, "states_asked": len(policy.answers),
            "n_states": policy.observation.n_states, "invalid_answers": policy.invalid,
            "unasked_steps": policy.unasked_steps, "fallback_action": policy.fallback,
            "best_test_mean": self.best_batch, "heldout_steps_total": held.steps,
        }
        if policy.stop is not None and stopped_before is None:
            extra["calls_ended"] = f"{policy.stop} (during the held-out episodes); unknown states took the fallback"
        return extra

    def state_dict(self) -> dict[str, Any]:
        return {"best_batch": self.best_batch, "best_iteration": self.best_iteration,
                "policy": self.policy.state_dict() if self.policy is not None else self._pending_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_batch = state["best_batch"]
        self.best_iteration = int(state.get("best_iteration", 0))  # absent from checkpoints of earlier versions
        self._pending_state = state["policy"]
        if self.policy is not None and state["policy"] is not None:
            self.policy.load_state_dict(state["policy"])
