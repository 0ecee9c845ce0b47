"""The iteration: collect -> prompt -> propose -> validate -> evaluate -> keep -> log.

:func:`train` runs a whole run and writes the run directory of the contract (config.json, events.jsonl,
transcripts.jsonl, policies/iter_NNNN.json, best_policy.json, summary.json, training.png, testing.png).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .backends import BackendOptions, make_backend, parse_backend_spec
from .backends.base import Backend, Message, OutputFormat, RetryPolicy, Sampling
from .backends.keys import redact
from .collect import Collector, Episode, Rollouts
from .config import TrainConfig
from .envs import get_spec
from .envs.spec import EnvSpec
from .errors import (
    BackendAuthError,
    BackendError,
    ProposalError,
    ReplayExhausted,
    SpecError,
    UserError,
)
from .keeper import Keeper, seed_ranges
from .memory import ExperienceMemory
from .policy import TablePolicy
from .pricing import DEFAULT_PRICES, cost_usd, price_of
from .prompt import HistoryEntry, PromptBuilder, PromptContext
from .runlog import RunDir, append_jsonl, write_json_atomic
from .schema import json_schema_for, parse_proposal

__all__ = [
    "RunResult",
    "Usage",
    "Progress",
    "ProposalOutcome",
    "resolve_spec",
    "resolve_output_format",
    "propose",
    "config_record",
    "finish_run",
    "train",
]

AUTO_EDITS_ABOVE = 1000


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]


def resolve_spec(cfg: TrainConfig) -> EnvSpec:
    """The env spec with the config's overrides (bins, dims, env kwargs, binning) applied."""
    from .envs.overrides import apply_dims_bins, apply_env_kwargs

    spec = apply_env_kwargs(get_spec(cfg.env_id), cfg.env_kwargs)
    changes: dict[str, Any] = {}
    if cfg.binning:
        if cfg.binning not in ("uniform", "seed"):
            raise SpecError(f"bad binning {cfg.binning!r}: accepted uniform or seed")
        changes["binning"] = cfg.binning
    if cfg.dims is not None or cfg.bins is not None:
        spec = apply_dims_bins(spec, cfg.dims, cfg.bins)
    return spec.with_overrides(**changes).validate() if changes else spec.validate()


def resolve_output_format(cfg: TrainConfig, n_states: int) -> str:
    if cfg.output_format != "auto":
        return cfg.output_format
    return "edits" if n_states > AUTO_EDITS_ABOVE else "table"


def _edits_applier() -> Callable[..., Any] | None:
    try:
        from .edits import apply_edits_answer
    except ImportError:  # pragma: no cover - edits module absent
        return None
    return apply_edits_answer


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    cached_calls: int = 0
    unpriced_calls: int = 0

    def add(self, other: Usage) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class ProposalOutcome:
    table: np.ndarray | None
    errors: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    n_changed: int = 0
    notes: list[str] = field(default_factory=list)
    stop: str | None = None
    """Why the run must stop ('replay exhausted', 'budget'), or None."""


def _check_budget_is_priced(cfg: TrainConfig, backend: Backend) -> None:
    """``--budget-usd`` needs the model's price: without one every call costs "unknown" and the budget cannot hold."""
    if cfg.budget_usd is None or not backend.is_llm:
        return
    if price_of(backend.name, backend.model, cfg.prices_file) is None:
        table = cfg.prices_file or os.environ.get("LLM_POLICY_GEN_PRICES") or str(DEFAULT_PRICES)
        raise UserError(
            f"--budget-usd needs a price for {backend.name}:{backend.model} and the price table {table} has none; "
            f"add [{backend.name}] \"{backend.model}\" = {{ input = USD_PER_MTOK, output = USD_PER_MTOK }} there "
            "or pass --prices FILE"
        )


def _estimate_call_cost(backend: Backend, messages: list[Message], n_states: int, prices: str | None) -> float:
    chars = sum(len(m.content) for m in messages)
    c = cost_usd(backend.name, backend.model, chars // 3, max(200, n_states * 12), prices)
    return c or 0.0


def propose(
    backend: Backend,
    messages: list[Message],
    ctx: PromptContext,
    builder: PromptBuilder,
    cfg: TrainConfig,
    transcript: Callable[[dict[str, Any]], None],
    spent_usd: float,
) -> ProposalOutcome:
    """Ask the backend, validate, and send the errors back for repair up to ``cfg.repair_attempts`` times."""
    fmt = ctx.output_format
    output = OutputFormat(name=f"policy_{fmt}", json_schema=json_schema_for(fmt))  # type: ignore[arg-type]
    usage = Usage()
    errors: list[str] = []
    convo = list(messages)
    for attempt in range(cfg.repair_attempts + 1):
        would_hit = getattr(backend, "would_hit", None)
        cached = bool(would_hit(convo, output)) if callable(would_hit) else False
        if cfg.budget_usd is not None and backend.is_llm and not cached:
            est = _estimate_call_cost(backend, convo, ctx.observation.n_states, cfg.prices_file)
            if spent_usd + usage.cost_usd + est > cfg.budget_usd:
                return ProposalOutcome(None, errors or ["budget reached"], usage, stop="budget")
        rec: dict[str, Any] = {
            "iteration": ctx.iteration,
            "attempt": attempt + 1,
            "backend": backend.name,
            "model": backend.model,
            "messages": [m.to_dict() for m in convo],
            "prompt_chars": sum(len(m.content) for m in convo),
        }
        t_call = time.perf_counter()
        try:
            comp = backend.complete(convo, output, ctx)
        except ReplayExhausted as exc:
            return ProposalOutcome(None, errors, usage, stop=str(exc))
        except BackendError as exc:
            msg = redact(str(exc))
            rec.update(response_text="", valid=False, errors=[msg], input_tokens=0, output_tokens=0,
                       latency_s=round(time.perf_counter() - t_call, 4), cached=False, cost_usd=0.0)
            transcript(rec)
            errors = [msg]
            return ProposalOutcome(None, errors, usage)
        call_cost = cost_usd(backend.name, backend.model, comp.input_tokens, comp.output_tokens, cfg.prices_file)
        u = Usage(comp.input_tokens, comp.output_tokens, call_cost or 0.0, 1, int(comp.cached),
                  int(call_cost is None and backend.is_llm))
        usage.add(u)
        try:
            parsed = parse_proposal(comp.text, ctx.current_table, ctx.actions.n_actions, fmt,  # type: ignore[arg-type]
                                    apply_edits=_edits_applier(), observation=ctx.observation)
            errors = []
        except ProposalError as exc:
            parsed = None
            errors = exc.errors
        rec.update(
            comp.transcript_fields(),
            valid=parsed is not None,
            errors=errors,
            notes=parsed.notes if parsed else [],
            cost_usd=call_cost,
        )
        transcript(rec)
        if parsed is not None:
            return ProposalOutcome(parsed.table, [], usage, parsed.n_changed, parsed.notes)
        convo = convo + [Message("assistant", comp.text), Message("user", builder.repair(errors))]
    return ProposalOutcome(None, errors, usage)


class Progress:
    """A tqdm bar on stderr with the current and best test mean (a no-op when disabled)."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="it", file=sys.stderr, dynamic_ncols=True, leave=True)

    def update(self, cur: float | None, best: float | None) -> None:
        if self.bar is not None:
            fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
            self.bar.set_postfix_str(f"eval {fmt(cur)} best {fmt(best)}")
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/llm-policy-gen/responses`` (``~/.cache`` without the variable)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llm-policy-gen" / "responses"


def _backend_options(cfg: TrainConfig) -> BackendOptions:
    cache_dir = None
    if cfg.cache:
        cache_dir = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    return BackendOptions(
        base_url=cfg.base_url,
        retry=RetryPolicy(max_retries=cfg.max_retries, timeout_s=cfg.timeout_s),
        sampling=Sampling(temperature=cfg.temperature, max_output_tokens=cfg.max_output_tokens),
        cache_dir=cache_dir,
        seed=cfg.seed,
    )


def config_record(
    cfg: TrainConfig, spec: EnvSpec, backend: Backend, output_format: str, **extra: Any
) -> dict[str, Any]:
    """What a run's config.json holds: the resolved settings, env spec, backend, version and seeds (never a key)."""
    return {
        "package": "llm-policy-gen",
        "version": __version__,
        "seed": cfg.seed,
        **extra,
        "config": cfg.to_dict(),
        "env_spec": spec.to_dict(),
        "output_format": output_format,
        "backend": backend.describe(),
        "backend_is_llm": backend.is_llm,
        "seeds": seed_ranges(cfg.seed),
        "argv": [redact(a) for a in sys.argv],
    }


def finish_run(run: RunDir, summary: dict[str, Any], plots: bool, log: Callable[[str], None]) -> None:
    """Write ``summary.json`` and, when asked, the two plots (a plot failure never loses a finished run)."""
    write_json_atomic(run.summary, summary)
    if plots and run.events.exists():
        from .plots import plot_run

        try:
            plot_run(run.path)
        except Exception as exc:  # matplotlib errors are many and varied; the run's data is already safe
            log(f"warning: plots not written: {exc}")


class _Run:
    """One training run: its run directory, environment, memory, keeper and running totals.

    Each stage of an iteration is one method: :meth:`collect` (training episodes), :meth:`ask` (prompt, backend,
    validation), :meth:`judge` (keeper and held-out measurement) and :meth:`record` (events.jsonl).
    """

    def __init__(self, cfg: TrainConfig, spec: EnvSpec, backend: Backend) -> None:
        self.cfg, self.spec, self.backend = cfg, spec, backend
        self.t_start = time.perf_counter()
        self.obs = spec.observation_discretizer()
        self.acts = spec.action_discretizer()
        self.fmt = resolve_output_format(cfg, self.obs.n_states)
        self.dir = RunDir.create(Path(cfg.logs_dir), spec.env_id, cfg.backend or backend.name, cfg.seed, cfg.run_id)
        write_json_atomic(self.dir.config, config_record(cfg, spec, backend, self.fmt))
        self.collector = Collector(spec)
        self.memory = ExperienceMemory(self.obs.n_states, self.acts.n_actions, cfg.memory_capacity, cfg.gamma,
                                       cfg.best_k)
        self.builder = PromptBuilder(max_chars=cfg.max_prompt_chars)
        self.keeper = Keeper(self.collector, spec.default_table(), cfg.seed, cfg.eval_start, cfg.eval_max,
                             cfg.eval_rise_every)
        self.seeds = seed_ranges(cfg.seed)
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.usage = Usage()
        self.history: list[HistoryEntry] = []
        self.episodes_total = 0
        self.steps_total = 0
        self.heldout_total = 0
        self.train_counter = 0
        self.prompt_sizes: list[int] = []
        self.solved_at: int | None = None
        self.solved_iteration: int | None = None
        self.best_heldout: Rollouts | None = None

    # ------------------------------------------------------------------ helpers
    def policy(self, table: np.ndarray, meta: dict[str, Any]) -> TablePolicy:
        return TablePolicy(self.spec.env_id, self.obs, self.acts, table, meta)

    def count(self, episodes: list[Episode]) -> None:
        """Add episodes that fed a decision to the memory and to the totals."""
        self.memory.add(episodes)
        self.episodes_total += len(episodes)
        self.steps_total += sum(e.length for e in episodes)

    def measure_best(self, iteration: int) -> None:
        """The best table on the held-out seeds: reported, never used to decide."""
        seeds = [self.seeds["heldout"] + j for j in range(self.cfg.heldout_episodes)]
        self.best_heldout = self.collector.evaluate(self.keeper.best_table, seeds)
        self.heldout_total += self.cfg.heldout_episodes
        threshold = self.spec.reward_threshold
        if self.solved_at is None and threshold is not None and self.best_heldout.mean >= threshold:
            self.solved_at, self.solved_iteration = self.episodes_total, iteration

    @property
    def heldout_mean(self) -> float:
        return self.best_heldout.mean if self.best_heldout is not None else float("nan")

    # ------------------------------------------------------------------ stages
    def start(self) -> None:
        """Score the initial table on the first test seeds and the held-out seeds."""
        _, first = self.keeper.score_best(1)
        self.count(first)
        self.measure_best(0)
        self.policy(self.keeper.best_table, {"iteration": 0, "heldout_mean": self.heldout_mean}).save(
            self.dir.best_policy)

    def collect(self, iteration: int) -> tuple[list[Episode], float]:
        """Training episodes with the best table plus exploration; returns them and the epsilon used."""
        n = self.cfg.train_episodes
        seeds = [self.seeds["train"] + self.train_counter + j for j in range(n)]
        self.train_counter += n
        # Until a table beats the initial one there is nothing to exploit: training episodes act at random.
        epsilon = 1.0 if self.keeper.best_iteration == 0 else self.cfg.explore_epsilon
        episodes = self.collector.collect(self.keeper.best_table, seeds, epsilon, self.rng, iteration)
        self.count(episodes)
        return episodes, epsilon

    def ask(self, iteration: int) -> tuple[ProposalOutcome, int]:
        """Build the prompt, call the backend (with repairs); returns the outcome and the prompt's size."""
        best_mean, extra = self.keeper.score_best(iteration)
        self.count(extra)
        ctx = PromptContext(
            spec=self.spec, observation=self.obs, actions=self.acts, iteration=iteration,
            current_table=self.keeper.best_table, best_eval_mean=best_mean,
            eval_episodes=self.keeper.n_eval(iteration), memory=self.memory, evidence=self.memory.evidence(),
            history=list(self.history), output_format=self.fmt, best_k=self.cfg.best_k,
            worst_k=self.cfg.worst_k, seed=self.cfg.seed,
        )
        messages = self.builder.build(ctx)
        chars = sum(len(m.content) for m in messages)
        self.prompt_sizes.append(chars)
        outcome = propose(self.backend, messages, ctx, self.builder, self.cfg,
                          lambda rec: append_jsonl(self.dir.transcripts, rec), self.usage.cost_usd)
        self.usage.add(outcome.usage)
        return outcome, chars

    def judge(self, iteration: int, outcome: ProposalOutcome) -> tuple[bool, float | None, list[float], float]:
        """Keeper's verdict on a valid candidate; returns accepted, its test mean and returns, the best's mean."""
        if outcome.table is None:
            if outcome.stop is None:
                self.policy(self.keeper.best_table, {"iteration": iteration, "accepted": False, "candidate": None,
                                                     "errors": outcome.errors}).save(self.dir.policy_file(iteration))
            return False, None, [], self.keeper.score_best(iteration)[0]
        d = self.keeper.consider(outcome.table, iteration)
        self.count(d.episodes)
        self.policy(outcome.table, {"iteration": iteration, "accepted": d.accepted, "eval_mean": d.eval_mean,
                                    "eval_returns": d.eval_returns}).save(self.dir.policy_file(iteration))
        if d.accepted:
            self.measure_best(iteration)
            self.policy(self.keeper.best_table, {"iteration": iteration, "eval_mean": d.eval_mean,
                                                 "heldout_mean": self.heldout_mean}).save(self.dir.best_policy)
        return d.accepted, d.eval_mean, d.eval_returns, d.best_eval_mean

    def record(self, iteration: int, train_eps: list[Episode], epsilon: float, outcome: ProposalOutcome,
               verdict: tuple[bool, float | None, list[float], float], prompt_chars: int, t_iter: float) -> None:
        accepted, eval_mean, eval_returns, best_mean = verdict
        self.history.append(HistoryEntry(iteration, eval_mean, self.keeper.n_eval(iteration), accepted,
                                         outcome.n_changed, "; ".join(outcome.errors)[:200]))
        append_jsonl(self.dir.events, {
            "iteration": iteration,
            "train_return": float(np.mean([e.ret for e in train_eps])) if train_eps else None,
            "train_returns": [e.ret for e in train_eps],
            "train_epsilon": epsilon,
            "eval_mean": eval_mean,
            "eval_returns": eval_returns,
            "eval_episodes": self.keeper.n_eval(iteration),
            "best_eval_mean": best_mean,
            "heldout_mean": self.heldout_mean,
            "accepted": accepted,
            "valid": outcome.table is not None,
            "n_changed": outcome.n_changed,
            "episodes_total": self.episodes_total,
            "env_steps_total": self.steps_total,
            "heldout_episodes_total": self.heldout_total,
            "input_tokens": outcome.usage.input_tokens,
            "output_tokens": outcome.usage.output_tokens,
            "cost_usd": round(outcome.usage.cost_usd, 6),
            "input_tokens_total": self.usage.input_tokens,
            "output_tokens_total": self.usage.output_tokens,
            "cost_usd_total": round(self.usage.cost_usd, 6),
            "llm_calls": outcome.usage.calls,
            "validation_errors": outcome.errors,
            "notes": outcome.notes,
            "prompt_chars": prompt_chars,
            "wall_s": round(time.perf_counter() - t_iter, 4),
        })

    def summary(self, stop_reason: str) -> dict[str, Any]:
        held = self.best_heldout
        sizes = self.prompt_sizes
        return {
            "env_id": self.spec.env_id,
            "backend": self.backend.name,
            "model": self.backend.model,
            "is_llm": self.backend.is_llm,
            "seed": self.cfg.seed,
            "best_eval_mean": held.mean if held is not None else None,
            "best_eval_std": float(np.std(held.returns)) if held is not None else None,
            "best_eval_episodes": int(held.returns.size) if held is not None else 0,
            "best_iteration": self.keeper.best_iteration,
            "reward_threshold": self.spec.reward_threshold,
            "solved": self.solved_at is not None,
            "episodes_to_solve": self.solved_at,
            "iteration_solved": self.solved_iteration,
            "iterations": len(self.history),
            "episodes_total": self.episodes_total,
            "env_steps_total": self.steps_total,
            "heldout_episodes_total": self.heldout_total,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cost_usd": round(self.usage.cost_usd, 6),
            "cost_complete": self.usage.unpriced_calls == 0,
            "llm_calls": self.usage.calls,
            "cached_calls": self.usage.cached_calls,
            "invalid_iterations": sum(1 for h in self.history if h.eval_mean is None),
            "prompt_chars_first": sizes[0] if sizes else None,
            "prompt_chars_last": sizes[-1] if sizes else None,
            "prompt_chars_max": max(sizes) if sizes else None,
            "stop_reason": stop_reason,
            "wall_s": round(time.perf_counter() - self.t_start, 3),
        }


def train(
    cfg: TrainConfig,
    backend: Backend | None = None,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
) -> RunResult:
    """Run the loop for ``cfg`` and return the run directory and summary."""
    cfg.validate()
    spec = resolve_spec(cfg)
    if spec.train_defaults:
        cfg = cfg.with_env_defaults(spec.train_defaults).validate()
    if backend is None:
        if cfg.backend is None:
            from .backends import default_backend_spec

            name, why = default_backend_spec()
            cfg = dataclasses.replace(cfg, backend=name)
            log(f"backend: {name} ({why})")
        assert cfg.backend is not None
        parse_backend_spec(cfg.backend)
        backend = make_backend(cfg.backend, _backend_options(cfg))
    if not backend.is_llm and backend.name == "offline":
        log("backend: offline -- a deterministic optimiser, NOT an LLM (the baseline every LLM must beat)")
    _check_budget_is_priced(cfg, backend)
    if cfg.mode == "direct":
        from .direct import train_direct

        return train_direct(cfg, spec, backend, log)

    run = _Run(cfg, spec, backend)
    stop_reason = "iterations done"
    since_best = 0
    progress = Progress(cfg.iterations, cfg.progress, f"{spec.env_id} [{backend.name}]")
    try:
        run.start()
        for iteration in range(1, cfg.iterations + 1):
            t_iter = time.perf_counter()
            train_eps, epsilon = run.collect(iteration)
            try:
                outcome, chars = run.ask(iteration)
            except BackendAuthError:
                stop_reason = "credentials refused"
                raise
            if outcome.stop is not None and outcome.table is None and not outcome.usage.calls:
                stop_reason = outcome.stop  # replay exhausted or budget reached before any call
                log(f"run ends: {outcome.stop}")
                break
            verdict = run.judge(iteration, outcome)
            run.record(iteration, train_eps, epsilon, outcome, verdict, chars, t_iter)
            since_best = 0 if verdict[0] else since_best + 1
            progress.update(verdict[1], verdict[3])
            if outcome.stop is not None:
                stop_reason = outcome.stop
                log(f"run ends: {outcome.stop}")
                break
            if cfg.patience and since_best >= cfg.patience:
                stop_reason = f"no new best for {cfg.patience} iterations"
                break
    except KeyboardInterrupt:
        stop_reason = "interrupted"
        raise
    except Exception as exc:
        if stop_reason == "iterations done":
            stop_reason = f"failed: {type(exc).__name__}: {redact(str(exc))[:200]}"
        raise
    finally:
        progress.close()
        run.collector.close()
        summary = run.summary(stop_reason)
        finish_run(run.dir, summary, cfg.plots, log)
    return RunResult(run.dir.path, summary)
