"""Direct LLM policy (``--mode direct``): the model picks each action.

The other approach of the seed project. At every step the observation is written as text (the raw values of the
observation, and the discretized state's description from the observation discretizer) and the backend is asked
for one line ``Action: N`` (plain text: :class:`~llm_policy_gen.backends.base.OutputFormat` with no JSON schema;
templates ``prompts/direct_system.md`` and ``prompts/direct_user.md``).

**Calls are bounded.** The answer is cached per discretized state: a state is asked about once, on its first visit,
and every later visit reuses the answer, so a run makes at most ``n_states`` calls however many episodes it runs.
The cached answers form a table, saved as ``best_policy.json`` (states never asked hold the fallback action), so
``llm-policy-gen evaluate RUN_DIR`` replays exactly what the model chose.

**Invalid answers.** The answer's last ``Action: N`` (case-insensitive; ``Action = N`` and markdown bold are
accepted) is used. No such line, an ``N`` outside ``0..n_actions-1`` or a failed call (transport errors after the
retry policy) make the state fall back to the spec's ``default_action``; the fallback is cached like an answer and
counted (``invalid_answers`` in events and summary). There is no repair round: that keeps the one-call-per-state
bound.

**Iterations.** There is no keeper: one iteration is a batch of ``train_episodes`` episodes (default 4, seeded from
the training seed range) with the model acting greedily. ``eval_mean`` and ``train_return`` of an iteration are both
the batch's mean return; ``best_eval_mean`` is the best batch mean so far and ``accepted`` says the batch set it.
At the end the policy runs ``heldout_episodes`` (default 100) held-out episodes, still asking the model about new
states; their mean is the summary's ``best_eval_mean``. ``episodes_total`` counts the training episodes; held-out
episodes are counted apart, as in table mode.

**Stopping.** When a ``replay:`` file runs out or the next call would pass ``--budget-usd``, no more calls are made:
unknown states take the fallback action (not cached, not counted as invalid), the iteration finishes and the run
ends cleanly; the held-out measure then uses the same rule, which is what ``best_policy.json`` holds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import Any

import numpy as np

from .backends.base import Backend, Message, OutputFormat
from .backends.keys import redact
from .config import TrainConfig
from .discretize import BoxDiscretizer
from .envs.make import make_env
from .envs.spec import EnvSpec
from .errors import BackendError, ReplayExhausted, UserError
from .keeper import seed_ranges
from .loop import Progress, RunResult, Usage, config_record, finish_run
from .policy import TablePolicy
from .pricing import cost_usd
from .prompt import PromptBuilder
from .runlog import RunDir, append_jsonl, write_json_atomic

__all__ = ["DIRECT_OUTPUT", "TABLE_BACKENDS", "parse_action", "observation_text", "DirectPolicy", "train_direct"]

DIRECT_OUTPUT = OutputFormat(name="direct_action", json_schema=None)
#: Backends that write whole tables from the prompt context and cannot answer one observation.
TABLE_BACKENDS = ("offline", "q-learning", "random")
_ACTION = re.compile(r"action\**\s*[:=]\s*\**\s*(-?\d+)", re.IGNORECASE)
_ESTIMATED_ANSWER_TOKENS = 16


def parse_action(text: str, n_actions: int) -> tuple[int | None, list[str]]:
    """The action of an ``Action: N`` answer (the last such line), or ``None`` and the reasons it was refused."""
    found = _ACTION.findall(text or "")
    if not found:
        return None, [f"no 'Action: N' line found (N in 0..{n_actions - 1})"]
    a = int(found[-1])
    if not 0 <= a < n_actions:
        return None, [f"action {a} out of range 0..{n_actions - 1}"]
    return a, []


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
    return f"observation = {int(np.asarray(obs).reshape(-1)[0])} ({disc.describe_state(state)})"


class DirectPolicy:
    """Asks the backend once per discretized state and caches the answer."""

    def __init__(
        self,
        backend: Backend,
        spec: EnvSpec,
        cfg: TrainConfig,
        transcript: Callable[[dict[str, Any]], None],
        builder: PromptBuilder | None = None,
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.cfg = cfg
        self.transcript = transcript
        self.builder = builder or PromptBuilder(max_chars=cfg.max_prompt_chars)
        self.observation = spec.observation_discretizer()
        self.actions = spec.action_discretizer()
        self.fallback = int(spec.default_action)
        self.cache: dict[int, int] = {}
        self.usage = Usage()
        self.invalid = 0
        self.unasked_steps = 0
        self.errors: list[str] = []
        self.stop: str | None = None
        self.iteration = 0
        self.phase = "train"

    # ------------------------------------------------------------------ prompt
    def messages(self, obs: Any, state: int) -> list[Message]:
        b, spec = self.builder, self.spec
        fields = {
            **b.task_fields(spec, self.actions),
            "observation": observation_text(spec, obs, state),
            "state": state,
            "state_description": self.observation.describe_state(state),
            "max_action": self.actions.n_actions - 1,
        }
        user = Template(b.template("direct_user.md")).safe_substitute(fields)
        return [Message("system", b.template("direct_system.md")), Message("user", user)]

    # ------------------------------------------------------------------ acting
    def table(self) -> np.ndarray:
        """The cached answers as a complete table (the fallback where no answer exists)."""
        t = np.full(self.observation.n_states, self.fallback, dtype=np.int64)
        for s, a in self.cache.items():
            t[s] = a
        return t

    def _over_budget(self, messages: list[Message]) -> bool:
        if self.cfg.budget_usd is None or not self.backend.is_llm:
            return False
        chars = sum(len(m.content) for m in messages)
        est = cost_usd(self.backend.name, self.backend.model, chars // 3, _ESTIMATED_ANSWER_TOKENS,
                       self.cfg.prices_file) or 0.0
        return self.usage.cost_usd + est > self.cfg.budget_usd

    def act(self, obs: Any) -> int:
        """The action for one raw observation (asking the backend on a state's first visit)."""
        state = int(self.observation.encode(np.asarray(obs))[0])
        if state in self.cache:
            return self.cache[state]
        if self.stop is not None:
            self.unasked_steps += 1
            return self.fallback
        messages = self.messages(obs, state)
        if self._over_budget(messages):
            self.stop = "budget reached"
            self.unasked_steps += 1
            return self.fallback
        rec: dict[str, Any] = {
            "iteration": self.iteration,
            "phase": self.phase,
            "attempt": 1,
            "backend": self.backend.name,
            "model": self.backend.model,
            "state": state,
            "messages": [m.to_dict() for m in messages],
            "prompt_chars": sum(len(m.content) for m in messages),
        }
        try:
            comp = self.backend.complete(messages, DIRECT_OUTPUT, None)
        except ReplayExhausted as exc:
            self.stop = str(exc)
            self.unasked_steps += 1
            return self.fallback
        except BackendError as exc:
            msg = redact(str(exc))
            self._refuse(state, [msg])
            rec.update(response_text="", valid=False, errors=[msg], action=self.fallback, fallback=True,
                       input_tokens=0, output_tokens=0, latency_s=0.0, cached=False, cost_usd=0.0)
            self.transcript(rec)
            return self.fallback
        call_cost = cost_usd(self.backend.name, self.backend.model, comp.input_tokens, comp.output_tokens,
                             self.cfg.prices_file)
        self.usage.add(Usage(comp.input_tokens, comp.output_tokens, call_cost or 0.0, 1, int(comp.cached),
                             int(call_cost is None and self.backend.is_llm)))
        action, errors = parse_action(comp.text, self.actions.n_actions)
        if action is None:
            self._refuse(state, errors)
        else:
            self.cache[state] = action
        rec.update(
            comp.transcript_fields(),
            valid=action is not None,
            errors=errors,
            action=self.cache[state],
            fallback=action is None,
            cost_usd=call_cost,
        )
        self.transcript(rec)
        return self.cache[state]

    def _refuse(self, state: int, errors: list[str]) -> None:
        self.cache[state] = self.fallback
        self.invalid += 1
        self.errors.extend(f"s{state}: {e}" for e in errors)

    def episode(self, env: Any, seed: int) -> tuple[float, int]:
        """Run one episode with the model acting; return its return and length."""
        obs, _ = env.reset(seed=int(seed))
        ret, steps = 0.0, 0
        while True:
            a = self.act(obs)
            obs, r, term, trunc, _ = env.step(self.actions.to_env(np.array([a]))[0])
            ret += float(r)
            steps += 1
            if term or trunc:
                return ret, steps


def train_direct(cfg: TrainConfig, spec: EnvSpec, backend: Backend, log: Callable[[str], None]) -> RunResult:
    """Run ``--mode direct`` for ``cfg`` and return the run directory and summary (see the module docstring)."""
    if backend.name in TABLE_BACKENDS:
        raise UserError(
            f"--mode direct needs a backend that answers free text (an LLM or replay:PATH), not {backend.name!r}, "
            "which writes whole tables; use --mode table with it"
        )
    t_start = time.perf_counter()
    run = RunDir.create(Path(cfg.logs_dir), spec.env_id, cfg.backend or backend.name, cfg.seed, cfg.run_id)
    policy = DirectPolicy(backend, spec, cfg, lambda rec: append_jsonl(run.transcripts, rec))
    write_json_atomic(run.config, config_record(
        cfg, spec, backend, "direct_action", mode="direct", fallback_action=policy.fallback,
        fallback_rule="spec default_action for invalid answers, failed calls and states left unasked",
    ))
    seeds = seed_ranges(cfg.seed)
    batch = max(1, cfg.train_episodes)
    threshold = spec.reward_threshold
    env = make_env(spec)
    episodes_total = steps_total = 0
    best_batch: float | None = None
    heldout_returns = np.zeros(0)
    heldout_steps = 0
    stop_reason = "iterations done"
    iterations_done = 0
    progress = Progress(cfg.iterations, cfg.progress, f"{spec.env_id} [{backend.name}, direct]")
    try:
        for iteration in range(1, cfg.iterations + 1):
            t_iter = time.perf_counter()
            policy.iteration = iteration
            before = (policy.usage.input_tokens, policy.usage.output_tokens, policy.usage.cost_usd,
                      policy.usage.calls, policy.invalid, len(policy.cache), len(policy.errors))
            returns = []
            for k in range(batch):
                ret, n = policy.episode(env, seeds["train"] + (iteration - 1) * batch + k)
                returns.append(ret)
                steps_total += n
            episodes_total += batch
            iterations_done = iteration
            mean = float(np.mean(returns))
            accepted = best_batch is None or mean > best_batch
            best_batch = mean if accepted else best_batch
            u = policy.usage
            append_jsonl(run.events, {
                "iteration": iteration,
                "mode": "direct",
                "train_return": mean,
                "train_returns": returns,
                "eval_mean": mean,
                "eval_returns": returns,
                "eval_episodes": batch,
                "best_eval_mean": best_batch,
                "accepted": accepted,
                "valid": policy.invalid == before[4],
                "episodes_total": episodes_total,
                "env_steps_total": steps_total,
                "input_tokens": u.input_tokens - before[0],
                "output_tokens": u.output_tokens - before[1],
                "cost_usd": round(u.cost_usd - before[2], 6),
                "input_tokens_total": u.input_tokens,
                "output_tokens_total": u.output_tokens,
                "cost_usd_total": round(u.cost_usd, 6),
                "llm_calls": u.calls - before[3],
                "new_states": len(policy.cache) - before[5],
                "states_cached": len(policy.cache),
                "invalid_answers": policy.invalid - before[4],
                "invalid_total": policy.invalid,
                "validation_errors": policy.errors[before[6]:][:8],
                "wall_s": round(time.perf_counter() - t_iter, 4),
            })
            progress.update(mean, best_batch)
            if policy.stop is not None:
                stop_reason = policy.stop
                log(f"run ends: {policy.stop}")
                break
        policy.phase = "heldout"
        heldout_seeds = [seeds["heldout"] + j for j in range(cfg.heldout_episodes)]
        results = [policy.episode(env, s) for s in heldout_seeds]
        heldout_returns = np.array([r for r, _ in results])
        heldout_steps = sum(n for _, n in results)
        if policy.stop is not None and stop_reason == "iterations done":
            stop_reason = f"{policy.stop} (during the held-out episodes)"
            log(f"calls end: {stop_reason}; unknown states took the fallback action")
    finally:
        progress.close()
        env.close()
        table = policy.table()
        TablePolicy(spec.env_id, policy.observation, policy.actions, table, {
            "mode": "direct",
            "states_asked": sorted(policy.cache),
            "fallback_action": policy.fallback,
            "heldout_mean": float(heldout_returns.mean()) if heldout_returns.size else None,
        }).save(run.best_policy)
        heldout_mean = float(heldout_returns.mean()) if heldout_returns.size else None
        solved = threshold is not None and heldout_mean is not None and heldout_mean >= threshold
        u = policy.usage
        summary = {
            "env_id": spec.env_id,
            "mode": "direct",
            "backend": backend.name,
            "model": backend.model,
            "is_llm": backend.is_llm,
            "seed": cfg.seed,
            "best_eval_mean": heldout_mean,
            "best_eval_std": float(np.std(heldout_returns)) if heldout_returns.size else None,
            "best_eval_episodes": int(heldout_returns.size),
            "best_iteration": iterations_done,
            "reward_threshold": threshold,
            "solved": solved,
            "episodes_to_solve": episodes_total if solved else None,
            "iterations": iterations_done,
            "episodes_total": episodes_total,
            "env_steps_total": steps_total,
            "heldout_episodes_total": int(heldout_returns.size),
            "heldout_steps_total": heldout_steps,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cost_usd": round(u.cost_usd, 6),
            "cost_complete": u.unpriced_calls == 0,
            "llm_calls": u.calls,
            "cached_calls": u.cached_calls,
            "states_asked": len(policy.cache),
            "n_states": policy.observation.n_states,
            "invalid_answers": policy.invalid,
            "unasked_steps": policy.unasked_steps,
            "fallback_action": policy.fallback,
            "stop_reason": stop_reason,
            "wall_s": round(time.perf_counter() - t_start, 3),
        }
        finish_run(run, summary, cfg.plots, log)
    return RunResult(run.path, summary)
