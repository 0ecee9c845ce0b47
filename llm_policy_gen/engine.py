"""The run engine: one iteration driver for every mode, with checkpoints, resume and exact replay.

:func:`train` starts a run and :func:`resume` continues one from its directory alone. Both drive a :class:`Run`,
which owns what every mode shares -- the environment's discretizers, the collector, the experience memory, the
keeper, the backend (a proposer, and for LLM backends the session), the counters and the run directory -- and calls
the mode (:mod:`llm_policy_gen.modes`) once per iteration. After each iteration it appends the iteration's record
(``events.jsonl`` and the other writers), then writes ``checkpoint.npz`` atomically: memory, keeper, random
generator, proposer, mode and session state and every counter. A run interrupted (Ctrl-C) or killed (``kill -9``)
at any moment resumes from the last checkpoint; the unfinished iteration is redone, and its model calls that were
already recorded are answered from the record (never sent again, their tokens and cost counted once).

Stops, checked before each iteration: ``--iterations``, ``--max-episodes`` (counted training, test and confirmation
episodes), ``--patience``; after an iteration: the budget, a replay that ran out, and an unreachable backend
(``unreachable_after`` iterations in a row without one answered call; when the very first call of a run reaches no
server, the run stops at once with an error naming the URL).
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .backends import BACKENDS, base_url_variable, default_backend_spec, is_client, is_llm, parse_backend_spec
from .checkpoint import load_checkpoint, save_checkpoint
from .clients.base import ClientOptions, CountsTokens, LLMClient, Message, Sampling
from .clients.cache import ResponseCache
from .clients.keys import endpoint_notice, is_loopback_url, redact, remember_url, without_userinfo
from .clients.replay import SOURCE_FIELDS
from .clients.retry import RetryPolicy
from .clients.sdk import SDKClient
from .clients.session import Answer, LLMSession
from .clients.transcript import RecordedCalls, Transcript
from .clients.usage import Budget, CallLimiter, LocalLimiter, Usage
from .collect import Collector, Episode, Rollouts
from .config import RESUME_OPTIONS, TrainConfig, option_name  # RESUME_OPTIONS: declared on the fields
from .console import Console
from .envs import get_spec
from .envs.spec import EnvSpec
from .errors import BackendAuthError, BackendUnreachable, EndpointError, NoCallSucceeded, RunInterrupted, UserError
from .formats import FORMATS, table_format_names
from .formats.base import AnswerFormat, Target
from .keeper import Keeper, SeedPlan, Verdict
from .locks import LOCK_FILES, FolderLock, HeldInterrupts
from .memory import ExperienceMemory, episodes_from_state, episodes_state
from .modes import MODES
from .modes.base import Mode, Step
from .policy import Policy, TablePolicy
from .pricing import DEFAULT_PRICES, load_prices, price_of
from .prompt import HistoryEntry, PromptBuilder, PromptContext, default_token_cap
from .proposers.base import Proposer
from .proposers.llm import LLMProposer
from .runlog import JsonlWriter, Logger, RunDir, read_json, read_jsonl, rewrite_jsonl, write_json_atomic

__all__ = ["RunResult", "Run", "resolve_spec", "train", "resume", "default_cache_dir", "RESUME_OPTIONS"]


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]


def resolve_spec(cfg: TrainConfig) -> EnvSpec:
    """The env spec with the config's overrides (env kwargs, dims, bins, binning) applied."""
    from .envs.overrides import apply_dims_bins, apply_env_kwargs

    spec = apply_env_kwargs(get_spec(cfg.env_id), cfg.env_kwargs)
    if cfg.dims is not None or cfg.bins is not None:
        spec = apply_dims_bins(spec, cfg.dims, cfg.bins)
    if cfg.binning:
        spec = spec.with_overrides(binning=cfg.binning)
    return spec.validate()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/llm-policy-gen/responses`` (``~/.cache`` without the variable)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llm-policy-gen" / "responses"


def _client_options(cfg: TrainConfig) -> ClientOptions:
    remember_url(cfg.base_url)  # its password is redacted from everything this process writes
    return ClientOptions(
        base_url=cfg.base_url,
        retry=RetryPolicy(max_retries=cfg.max_retries, timeout_s=cfg.timeout_s),  # None: by the server's kind
        sampling=Sampling(temperature=cfg.temperature, max_output_tokens=cfg.max_output_tokens),
        local_concurrency=cfg.local_concurrency,
        n_ctx=cfg.n_ctx,
        threads=cfg.llm_threads,
    )


def _check_budget_is_priced(cfg: TrainConfig, provider: str, model: str, is_llm: bool) -> None:
    """``--budget-usd`` needs the model's price: without one every call costs "unknown" and the budget cannot hold."""
    if cfg.budget_usd is None or not is_llm:
        return
    if price_of(provider, model, cfg.prices_file) is None:
        table = cfg.prices_file or os.environ.get("LLM_POLICY_GEN_PRICES") or str(DEFAULT_PRICES)
        raise UserError(
            f"--budget-usd needs a price for {provider}:{model} and the price table {table} has none; "
            f"add [{provider}] \"{model}\" = {{ input = USD_PER_MTOK, output = USD_PER_MTOK }} there "
            "or pass --prices FILE"
        )


class Run:
    """One run: what every mode shares, the counters, and the run directory (implements ``RunServices``)."""

    def __init__(self, cfg: TrainConfig, spec: EnvSpec, mode: Mode, run_dir: RunDir, console: Console,
                 recorded: RecordedCalls | None = None, resumed: bool = False, limiter: CallLimiter | None = None,
                 budget: Budget | None = None) -> None:
        self.cfg, self.spec, self.mode, self.dir, self.console = cfg, spec, mode, run_dir, console
        self.t_start = time.perf_counter()
        self.observation = spec.observation_discretizer()
        self.actions = spec.action_discretizer()
        self.plan = SeedPlan(cfg.seed)
        self.collector = Collector(spec)
        self.memory = ExperienceMemory(self.observation.n_states, self.actions.n_actions, cfg.memory_capacity,
                                       cfg.gamma, cfg.best_k)
        self.keeper = Keeper(self.collector, spec.default_table(), cfg.seed, cfg.eval_start, cfg.eval_max,
                             cfg.eval_rise_every, cfg.confirm_episodes, cfg.confirm_z,
                             cfg.confirm_batches, fresh_test_seeds=cfg.test_seeds == "fresh")
        self.builder = PromptBuilder(max_chars=cfg.max_prompt_chars)
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.history: list[HistoryEntry] = []
        self.pending: list[Episode] = []
        self.iteration = 0
        self.episodes_total = 0
        self.steps_total = 0
        self.heldout_total = 0
        self.train_counter = 0
        self.prompt_sizes: list[int] = []
        self.solved_at: int | None = None
        self.solved_iteration: int | None = None
        self.best_heldout: Rollouts | None = None
        self.replaced_heldout: Rollouts | None = None
        """The held-out measurement of the table the last adoption replaced (logged with that adoption)."""
        self.since_best = 0
        self.unreachable_streak = 0
        self.accepted_count = 0
        self.wall_before = 0.0
        """Wall seconds spent by earlier processes of this run (resume)."""
        self.mode_facts = mode.prepare(self, resumed)
        self.backend_name, self.model = parse_backend_spec(cfg.backend or "offline")
        self.transcript = Transcript(self.dir.transcripts, {
            "env_id": spec.env_id, "n_states": self.observation.n_states, "n_actions": self.actions.n_actions,
            "mode": mode.name, "format": self.mode_facts.get("output_format", ""),
        })
        self._session: LLMSession | None = None
        self._proposer: Proposer | None = None
        self._local_usage = Usage()
        """Calls of a non-LLM proposer (free; counted so that runs compare call for call)."""
        self._shared_budget = budget is not None
        self.endpoint: str | None = None
        """Where the calls go and where its base URL and key came from (said before the first call)."""
        self._make_backend(recorded, limiter, budget)
        from .loggers import make_writers  # --log csv,tensorboard

        self.logger = Logger([JsonlWriter(self.dir.events), console, *make_writers(cfg.log, self.dir.path)])
        self.committed: dict[str, Any] | None = None

    # ------------------------------------------------------------------ backend
    def _make_backend(self, recorded: RecordedCalls | None, limiter: CallLimiter | None,
                      budget: Budget | None) -> None:
        cfg, name, model = self.cfg, self.backend_name, self.model
        factory = BACKENDS.load(name)
        if not is_client(name):
            if self.mode.needs_session:
                raise UserError(f"--mode {self.mode.name} needs a backend that answers free text (an LLM or "
                                f"replay:PATH), not {name!r}, which writes whole tables; use --mode table with it")
            self._proposer = factory(seed=cfg.seed, transcript=self.transcript)
            return
        client: LLMClient
        if name == "replay":
            client = factory(model)
            self._check_replay_source(client)
        else:
            client = factory(model, _client_options(cfg))
        free = isinstance(client, SDKClient) and client.free
        _check_budget_is_priced(cfg, client.provider, client.model, client.is_llm and not free)
        self._fit_prompts_and_samples(client)
        described = client.describe()
        if "base_url" in described:  # a client that calls a server: say where, and where URL and key came from
            self.endpoint = endpoint_notice(f"{client.provider}:{client.model}", str(described["base_url"] or ""),
                                            bool(cfg.base_url), base_url_variable(name),
                                            str(described.get("key_source") or ""))
            self.log(self.endpoint)
        cache = None
        if cfg.cache and client.is_llm:
            folder = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
            base_url = str(client.describe().get("base_url", "") or "")
            identity = client.cache_identity if isinstance(client, SDKClient) else client.model
            cache = ResponseCache(folder, client.provider, identity, base_url,
                                  _client_options(cfg).sampling)
        self._session = LLMSession(
            client, self.transcript, repair_attempts=cfg.repair_attempts, budget=budget or Budget(cfg.budget_usd),
            prices_file=cfg.prices_file, cache=cache, recorded=recorded,
            limiter=limiter or LocalLimiter(cfg.max_concurrent_calls), max_concurrent=cfg.max_concurrent_calls,
            log=self.log, seed=cfg.seed, max_answer_chars=cfg.max_answer_chars,
        )
        self._proposer = LLMProposer(self._session, self.builder)

    def _fit_prompts_and_samples(self, client: LLMClient) -> None:
        """Prompts in tokens where the client knows its tokenizer (``--max-prompt-tokens``), and a note where K
        candidates are likely to be identical samples."""
        cfg = self.cfg
        if isinstance(client, CountsTokens):
            cap = cfg.max_prompt_tokens or default_token_cap(cfg.max_prompt_chars, client.context_tokens,
                                                             cfg.max_output_tokens)
            self.builder.measure_in_tokens(cap, client.count_tokens)
        elif cfg.max_prompt_tokens is not None and client.is_llm:
            self.log(f"note: --max-prompt-tokens has no effect on {client.provider} (its tokenizer is not known "
                     f"here); prompts are capped at --max-prompt-chars {cfg.max_prompt_chars}")
        if cfg.temperature == 0 and cfg.candidates > 1 and client.is_llm:
            seeds = isinstance(client, SDKClient) and client.takes_seed
            why = ("each call carries its own seed, but at temperature 0 most models decode greedily" if seeds
                   else f"{client.provider} takes no seed")
            self.log(f"warning: --temperature 0 with --candidates {cfg.candidates}: the candidates are likely "
                     f"identical samples of one prompt ({why}); give a --temperature above 0 for distinct ones")

    def _check_replay_source(self, client: Any) -> None:
        """Refuse a transcript made for another environment, table size, mode or answer format."""
        mine = dict(self.transcript.common)
        for f in SOURCE_FIELDS:
            theirs = client.source.get(f)
            if theirs is not None and mine.get(f) not in (None, "") and theirs != mine.get(f):
                raise UserError(f"replay file {client.path} was recorded with {f} {theirs!r}, this run has "
                                f"{mine.get(f)!r}; replay it with the recorded run's settings")

    @property
    def proposer(self) -> Proposer | None:
        return self._proposer

    @property
    def session(self) -> LLMSession | None:
        return self._session

    @property
    def usage(self) -> Usage:
        return self._session.usage if self._session is not None else self._local_usage

    @property
    def is_llm(self) -> bool:
        return is_llm(self.backend_name)

    def describe_backend(self) -> dict[str, Any]:
        if self._session is not None:
            return self._session.client.describe()
        assert self._proposer is not None
        return self._proposer.describe()

    # ------------------------------------------------------------------ services for modes
    def log(self, text: str) -> None:
        self.console.notice(text)

    def count(self, episodes: list[Episode]) -> None:
        self.memory.add(episodes)
        self.pending.extend(episodes)
        self.episodes_total += len(episodes)
        self.steps_total += sum(e.length for e in episodes)

    def train_episodes(self, policy: Policy | np.ndarray, iteration: int, epsilon: float = 0.0,
                       n: int | None = None) -> list[Episode]:
        episodes = self.collector.collect(policy, self.train_seeds(n), epsilon, self.rng, iteration)
        self.count(episodes)
        return episodes

    def train_seeds(self, n: int | None = None) -> list[int]:
        n = self.cfg.train_episodes if n is None else n
        seeds = [self.plan.train(self.train_counter + j) for j in range(n)]
        self.train_counter += n
        return seeds

    def context(self, iteration: int, fmt: AnswerFormat[Any], target: Target, current: np.ndarray,
                best_mean: float | None, **kw: Any) -> PromptContext:
        return PromptContext(
            spec=self.spec, observation=self.observation, actions=self.actions, iteration=iteration,
            current_table=current, best_eval_mean=best_mean, eval_episodes=self.keeper.n_eval(iteration),
            memory=self.memory, evidence=self.memory.evidence(), fmt=fmt, target=target,
            history=list(self.history), best_k=self.cfg.best_k, worst_k=self.cfg.worst_k, seed=self.cfg.seed,
            candidates=self.cfg.candidates, mode=self.mode.name, fresh=list(self.pending), **kw,
        )

    def propose(self, ctx: PromptContext, k: int) -> list[Answer[Any]]:
        assert self._proposer is not None
        messages: list[Message] = self.builder.build(ctx)
        self.prompt_sizes.append(sum(len(m.content) for m in messages))
        answers = self._proposer.propose(ctx, messages, k)
        if self._session is None:
            for a in answers:
                self._local_usage.add(a.usage)
        self.pending = []
        return answers

    def judge(self, tables: list[np.ndarray | None], iteration: int,
              sources: list[dict[str, Any] | None] | None = None) -> Verdict:
        verdict = self.keeper.judge(tables, iteration, sources)
        self.count(verdict.episodes)
        meta: dict[str, Any] = {"iteration": iteration, "candidate_means": verdict.test_means,
                                "accepted": verdict.accepted}
        if verdict.chosen is not None:
            k = verdict.chosen
            table = tables[k]
            assert table is not None
            meta.update(candidate=k + 1, eval_mean=verdict.test_means[k], eval_returns=verdict.test_returns[k])
            self.save_policy(f"policies/iter_{iteration:04d}.json", table, meta, sources[k] if sources else None)
        else:  # no valid candidate: the kept table stands
            meta.update(candidate=None)
            self.save_policy(f"policies/iter_{iteration:04d}.json", self.keeper.best_table, meta,
                             self.keeper.best_source)
        if verdict.accepted:
            self.measure_best(iteration)
            self.save_best({"eval_mean": verdict.chosen_mean})
        return verdict

    def save_policy(self, path_name: str, table: np.ndarray, meta: dict[str, Any],
                    source: dict[str, Any] | None = None) -> None:
        TablePolicy(self.spec.env_id, self.observation, self.actions, np.asarray(table), meta,
                    dict(self.spec.kwargs), source).save(self.dir.path / path_name)

    def save_best(self, meta: dict[str, Any] | None = None) -> None:
        adopted = [h.eval_mean for h in self.history if h.iteration == self.keeper.best_iteration and h.accepted]
        self.save_policy("best_policy.json", self.keeper.best_table,
                         {"iteration": self.keeper.best_iteration, "heldout_mean": self.heldout_mean,
                          "heldout_seeds": [self.plan.heldout(0), self.plan.heldout(self.cfg.heldout_episodes - 1)],
                          **({"eval_mean": adopted[0]} if adopted else {}), **(meta or {})}, self.keeper.best_source)

    def measure_best(self, iteration: int) -> None:
        """The kept table on the held-out seeds: reported, never used to decide."""
        seeds = [self.plan.heldout(j) for j in range(self.cfg.heldout_episodes)]
        self.replaced_heldout = self.best_heldout
        self.best_heldout = self.collector.evaluate(self.keeper.best_table, seeds)
        self.heldout_total += self.cfg.heldout_episodes
        threshold = self.spec.reward_threshold
        if self.solved_at is None and threshold is not None and self.best_heldout.mean >= threshold:
            self.solved_at, self.solved_iteration = self.episodes_total, iteration

    @property
    def heldout_mean(self) -> float | None:
        return self.best_heldout.mean if self.best_heldout is not None else None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        held = self.best_heldout
        return {
            "iteration": self.iteration,
            "episodes_total": self.episodes_total,
            "steps_total": self.steps_total,
            "heldout_total": self.heldout_total,
            "train_counter": self.train_counter,
            "prompt_sizes": list(self.prompt_sizes),
            "solved_at": self.solved_at,
            "solved_iteration": self.solved_iteration,
            "since_best": self.since_best,
            "unreachable_streak": self.unreachable_streak,
            "accepted_count": self.accepted_count,
            "wall_s": self.wall_before + time.perf_counter() - self.t_start,
            "heldout": None if held is None else {"seeds": held.seeds, "returns": held.returns,
                                                  "lengths": held.lengths},
            "history": [h.to_dict() for h in self.history],
            "pending": episodes_state(self.pending),
            "rng": self.rng.bit_generator.state,
            "memory": self.memory.state_dict(),
            "keeper": self.keeper.state_dict(),
            "proposer": self._proposer.state_dict() if self._proposer is not None else {},
            "session": self._session.state_dict() if self._session is not None else {},
            "usage": self.usage.to_dict(),
            "mode": self.mode.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.episodes_total = int(state["episodes_total"])
        self.steps_total = int(state["steps_total"])
        self.heldout_total = int(state["heldout_total"])
        self.train_counter = int(state["train_counter"])
        self.prompt_sizes = [int(x) for x in state["prompt_sizes"]]
        self.solved_at = state["solved_at"]
        self.solved_iteration = state["solved_iteration"]
        self.since_best = int(state["since_best"])
        self.unreachable_streak = int(state["unreachable_streak"])
        self.accepted_count = int(state["accepted_count"])
        self.wall_before = float(state["wall_s"])
        held = state["heldout"]
        self.best_heldout = None if held is None else Rollouts(np.asarray(held["seeds"]),
                                                              np.asarray(held["returns"]),
                                                              np.asarray(held["lengths"]))
        self.history = [HistoryEntry.from_dict(h) for h in state["history"]]
        self.pending = episodes_from_state(state["pending"])
        self.rng.bit_generator.state = state["rng"]
        self.memory.load_state_dict(state["memory"])
        self.keeper.load_state_dict(state["keeper"])
        if self._proposer is not None:
            self._proposer.load_state_dict(state["proposer"])
        if self._session is not None:
            self._session.load_state_dict(state["session"], restore_budget=not self._shared_budget)
        else:
            self._local_usage = Usage.from_dict(state["usage"])
        self.mode.load_state_dict(state["mode"])

    def mode_start(self) -> None:
        """A new run's start (the mode's, e.g. scoring the initial table), then checkpoint 0."""
        self.mode.start(self)
        self.checkpoint()

    def checkpoint(self) -> None:
        state = self.state_dict()
        save_checkpoint(self.dir.checkpoint, state)
        self.committed = state

    # ------------------------------------------------------------------ one iteration
    def record(self, step: Step, iteration: int, t_iter: float, usage: Usage) -> dict[str, Any]:
        """The iteration's events.jsonl record (and history entries)."""
        v = step.verdict
        answers = step.answers
        if v is not None:
            for k, a in enumerate(answers):
                mean = v.test_means[k] if k < len(v.test_means) else None
                chosen = v.chosen == k
                self.history.append(HistoryEntry(
                    iteration, mean, self.keeper.n_eval(iteration), v.accepted and chosen,
                    a.parsed.n_changed if a.parsed else 0, "; ".join(a.errors)[:200], a.candidate,
                    (v.confirmation.passed if v.confirmation is not None else None) if chosen else None))
        eval_mean = step.eval_mean if step.eval_mean is not None else (v.chosen_mean if v else None)
        eval_returns = step.eval_returns or (v.test_returns[v.chosen] if v is not None and v.chosen is not None
                                             else [])
        errors = [f"candidate {a.candidate}: {e}" if len(answers) > 1 else e for a in answers for e in a.errors]
        best_test = self.keeper.test_mean(iteration) if step.verdict is not None else step.fields.get("best_test_mean")
        rec: dict[str, Any] = {
            "iteration": iteration,
            "mode": self.mode.name,
            "train_return": float(np.mean([e.ret for e in step.train_episodes])) if step.train_episodes else None,
            "train_returns": [e.ret for e in step.train_episodes],
            "train_epsilon": step.train_epsilon,
            "eval_mean": eval_mean,
            "eval_returns": list(eval_returns),
            "eval_episodes": self.keeper.n_eval(iteration),
            "candidates": len(answers),
            "candidate_means": list(v.test_means) if v is not None else [],
            "chosen": (v.chosen + 1) if v is not None and v.chosen is not None else None,
            "best_test_mean": best_test,
            "best_eval_mean": self.heldout_mean,
            "heldout_mean": self.heldout_mean,
            "accepted": bool(step.accepted),
            "accepted_total": self.accepted_count,
            "valid": any(a.ok for a in answers) if answers else True,
            "n_changed": next((a.parsed.n_changed for k, a in enumerate(answers)
                               if a.parsed is not None and v is not None and v.chosen == k), 0),
            "episodes_total": self.episodes_total,
            "env_steps_total": self.steps_total,
            "heldout_episodes_total": self.heldout_total,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens,
            "cost_usd": round(usage.cost_usd, 6),
            "input_tokens_total": self.usage.input_tokens,
            "output_tokens_total": self.usage.output_tokens,
            "cost_usd_total": round(self.usage.cost_usd, 6),
            "cost_complete": self.usage.unpriced_calls == 0,
            "llm_calls": usage.calls,
            "failed_calls": usage.failed_calls,
            "first_call_error": next((a.errors[0] for a in answers if a.failed and a.errors), None),
            "validation_errors": errors,
            "notes": [n for a in answers if a.parsed for n in a.parsed.notes],
            "prompt_chars": self.prompt_sizes[-1] if self.prompt_sizes else None,
            "wall_s": round(time.perf_counter() - t_iter, 4),
        }
        if v is not None and v.confirmation is not None:
            rec["confirmation"] = v.confirmation.to_dict()
        if step.accepted and self.best_heldout is not None:
            rec.update(heldout_std=float(np.std(self.best_heldout.returns)),
                       heldout_episodes=int(self.best_heldout.returns.size),
                       heldout_returns=_returns(self.best_heldout))
            before = self.replaced_heldout
            if before is not None and np.array_equal(before.seeds, self.best_heldout.seeds):
                # the table it replaced, on the same held-out seeds: an adoption that lowered the held-out mean is
                # counted from the events alone (bench/drift.py), also where per-iteration policy files are gone
                rec["heldout_returns_before"] = _returns(before)
        rec.update(step.fields)
        return rec

    def summary(self, stop_reason: str, extra: dict[str, Any] | None = None,
                state: dict[str, Any] | None = None) -> dict[str, Any]:
        """``summary.json``; ``state`` (a committed checkpoint state) describes the run as of its last finished
        iteration, so an interrupted run's summary agrees with its files."""
        s = state or self.state_dict()
        held = s["heldout"]
        returns = np.asarray(held["returns"]) if held is not None else None
        sizes = s["prompt_sizes"]
        usage = Usage.from_dict(s["usage"])
        history = s["history"]
        seeds = self.keeper.seeds(max(1, int(s["iteration"])))
        kept = s["keeper"]
        best_returns = dict(zip((int(x) for x in kept["best_seeds"]), (float(x) for x in kept["best_returns"]),
                                strict=True))
        best_test = float(np.mean([best_returns[x] for x in seeds])) if all(x in best_returns for x in seeds) \
            else None
        out = {
            "env_id": self.spec.env_id,
            "mode": self.mode.name,
            "backend": self.backend_name,
            "model": self.model,
            "is_llm": self.is_llm,
            "seed": self.cfg.seed,
            "candidates": self.cfg.candidates,
            "best_eval_mean": float(returns.mean()) if returns is not None and returns.size else None,
            "best_eval_std": float(np.std(returns)) if returns is not None and returns.size else None,
            "best_eval_episodes": int(returns.size) if returns is not None else 0,
            "best_test_mean": best_test,
            "best_iteration": int(kept["best_iteration"]),
            "accepted_count": int(s["accepted_count"]),
            "never_accepted": int(s["accepted_count"]) == 0,
            "reward_threshold": self.spec.reward_threshold,
            "solved": s["solved_at"] is not None,
            "episodes_to_solve": s["solved_at"],
            "iteration_solved": s["solved_iteration"],
            "iterations": int(s["iteration"]),
            "episodes_total": int(s["episodes_total"]),
            "env_steps_total": int(s["steps_total"]),
            "heldout_episodes_total": int(s["heldout_total"]),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens,
            "cost_usd": round(usage.cost_usd, 6),
            "cost_complete": usage.unpriced_calls == 0,
            "llm_calls": usage.calls,
            "cached_calls": usage.cached_calls,
            "failed_calls": usage.failed_calls,
            "first_call_error": s["session"].get("first_error") if s["session"] else None,
            "invalid_iterations": len({h["iteration"] for h in history}
                                      - {h["iteration"] for h in history if h["eval_mean"] is not None}),
            "prompt_chars_first": sizes[0] if sizes else None,
            "prompt_chars_last": sizes[-1] if sizes else None,
            "prompt_chars_max": max(sizes) if sizes else None,
            "stop_reason": stop_reason,
            "unreachable_after": self.cfg.unreachable_after,
            "wall_s": round(float(s["wall_s"]), 3),
        }
        if state is not None:  # calls of the iteration that did not finish are in the transcript, not the totals
            out["unfinished_iteration_calls"] = self.usage.calls - usage.calls
            out["unfinished_iteration_failed_calls"] = self.usage.failed_calls - usage.failed_calls
        out.update(extra or {})
        return out


# ---------------------------------------------------------------------------------------------------- driving
def _returns(rollouts: Rollouts) -> list[float]:
    """Held-out returns as logged: 6 significant digits (enough for any paired comparison of them)."""
    return [float(f"{x:.6g}") for x in np.asarray(rollouts.returns, dtype=float)]


def _config_record(run: Run) -> dict[str, Any]:
    cfg = run.cfg
    return {
        "package": "llm-policy-gen",
        "version": __version__,
        "seed": cfg.seed,
        "mode": run.mode.name,
        **run.mode_facts,
        "config": cfg.to_dict(),
        "env_spec": run.spec.to_dict(),
        "backend": run.describe_backend(),
        "backend_is_llm": run.is_llm,
        "seeds": run.plan.ranges(),
        "argv": [redact(a) for a in sys.argv],
    }


def _endpoint_error(run: Run, exc: BaseException) -> Exception:
    """The run's first call reached no server: a user error when the URL is the user's own setting."""
    var = base_url_variable(run.backend_name)
    user_set = bool(run.cfg.base_url) or bool(os.environ.get(var, "").strip())
    msg = f"{redact(str(exc))}; no call of this run reached the server"
    if user_set:
        return EndpointError(f"{msg} (check --base-url / {var})")
    return BackendUnreachable(msg)


def _drive(run: Run, first: int) -> tuple[str, bool]:
    """Iterations ``first..cfg.iterations``; returns the stop reason and whether the run ended inside an iteration
    it did not finish (a replay that ran out, a budget reached before any answer), whose episodes are not counted."""
    cfg = run.cfg
    stop_reason = "iterations done"
    for iteration in range(first, cfg.iterations + 1):
        if cfg.max_episodes is not None and run.episodes_total >= cfg.max_episodes:
            stop_reason = f"episode budget reached ({run.episodes_total} >= {cfg.max_episodes})"
            break
        if cfg.patience and run.since_best >= cfg.patience:
            stop_reason = f"no new best for {cfg.patience} iterations"
            break
        t_iter = time.perf_counter()
        before = run.usage.copy()
        ok_before = run.session.calls_ok if run.session is not None else 0
        tried_before = run.session.calls_tried if run.session is not None else 0
        step = run.mode.iterate(run, iteration)
        if run.session is not None:
            tried = run.session.calls_tried - tried_before
            answered = run.session.calls_ok - ok_before
            if tried and not answered:
                if run.session.calls_ok == 0 and any(a.unreachable for a in step.answers):
                    raise _endpoint_error(run, BackendUnreachable(next(a.errors[0] for a in step.answers
                                                                       if a.unreachable)))
                run.unreachable_streak += 1
            elif answered:
                run.unreachable_streak = 0
        if step.skipped:
            stop_reason = step.stop or "stopped"
            run.log(f"run ends: {stop_reason}")
            return stop_reason, True
        with HeldInterrupts():  # the iteration's record and its checkpoint go together (a Ctrl-C waits for both)
            run.iteration = iteration
            run.since_best = 0 if step.accepted else run.since_best + 1
            run.accepted_count += int(step.accepted)
            rec = run.record(step, iteration, t_iter, run.usage.minus(before))
            run.logger.write(rec)
            run.checkpoint()
        if step.stop is not None:
            stop_reason = step.stop
            run.log(f"run ends: {stop_reason}")
            break
        if run.unreachable_streak >= cfg.unreachable_after:
            stop_reason = "backend unreachable"
            run.log(f"run ends: {cfg.unreachable_after} iterations in a row without one answered call")
            break
    _check_some_call_succeeded(run)
    return stop_reason, False


def _check_some_call_succeeded(run: Run) -> None:
    """A run whose calls all failed ends with exit 1 and one line naming the first error and the URL, whatever
    ``--unreachable-after`` says: never "0 calls" and exit 0."""
    session = run.session
    if session is None or session.calls_ok or not session.usage.failed_calls:
        return
    error = session.first_error or "no error recorded"
    url = str(session.client.describe().get("base_url") or "")
    where = f" ({url})" if url and url not in error else ""
    n = session.usage.failed_calls
    raise NoCallSucceeded(f"no call of this run succeeded ({n} failed call{'s' if n != 1 else ''}); the first "
                          f"error{where}: {error}")


def _finish(run: Run, stop_reason: str, interrupted: bool, held: HeldInterrupts) -> dict[str, Any]:
    """Write summary.json (and the plots): from the last committed state when the run was interrupted or ended
    inside an unfinished iteration. Called with Ctrl-C held back (``held``), except in the mode's own ending."""
    state = run.committed if interrupted and run.committed is not None else None
    extra: dict[str, Any] = {}
    if state is not None:
        # The files must agree with the summary: the best policy as of the last finished iteration, and no policy
        # file of the iteration that did not finish.
        run.keeper.load_state_dict(state["keeper"])
        best = state["heldout"]
        run.best_heldout = None if best is None else Rollouts(np.asarray(best["seeds"]), np.asarray(best["returns"]),
                                                             np.asarray(best["lengths"]))
        run.save_best()
        for p in (run.dir.path / "policies").glob("iter_*.json"):
            if p.stem[5:].isdigit() and int(p.stem[5:]) > int(state["iteration"]):
                p.unlink()
    else:
        try:
            with held.allowed():  # the mode's ending may call the model: a Ctrl-C cuts it short
                extra = run.mode.finish(run)
        except (KeyboardInterrupt, Exception) as exc:  # the summary must still be written
            extra = {"finish_error": f"{type(exc).__name__}: {redact(str(exc))[:200]}"}
    summary = run.summary(stop_reason, extra, state)
    write_json_atomic(run.dir.summary, summary)
    if run.cfg.plots and run.dir.events.exists():
        from .plotting.curves import plot_run

        try:
            plot_run(run.dir.path)
        except Exception as exc:  # matplotlib errors are many and varied; the run's data is already safe
            run.log(f"warning: plots not written: {exc}")
    return summary


def _execute(run: Run, first: int) -> RunResult:
    stop_reason = "iterations done"
    interrupted = ended_inside = False
    try:
        stop_reason, ended_inside = _drive(run, first)
    except KeyboardInterrupt:
        stop_reason, interrupted = "interrupted", True
        raise RunInterrupted(str(run.dir.path), _kept(run)) from None
    except BackendAuthError:
        stop_reason, interrupted = "credentials refused", True
        raise
    except (BackendUnreachable, EndpointError):
        stop_reason, interrupted = "backend unreachable", True
        raise
    except NoCallSucceeded:
        stop_reason, interrupted = "failed: no call succeeded", True
        raise
    except OSError as exc:
        stop_reason, interrupted = f"failed: {exc.strerror or exc}", True
        if exc.errno == errno.ENOSPC:
            raise _disk_full(run, exc) from None
        raise
    except Exception as exc:
        stop_reason = f"failed: {type(exc).__name__}: {redact(str(exc))[:200]}"
        interrupted = True
        raise
    finally:
        with HeldInterrupts(raise_after=False) as late:  # the closing files are written whole, Ctrl-C or not
            run.logger.close()
            run.collector.close()
            summary = None
            try:
                summary = _finish(run, stop_reason, interrupted or ended_inside, late)
            except OSError as exc:
                if not interrupted:
                    if exc.errno == errno.ENOSPC:
                        raise _disk_full(run, exc) from None
                    raise
    if late.cut:  # a Ctrl-C cut the mode's ending short (its files are whole): the run says it was interrupted
        raise RunInterrupted(str(run.dir.path), _kept(run))
    assert summary is not None
    if summary["never_accepted"] and run.mode.name != "direct":
        run.log("note: no candidate was ever accepted; the best policy is the initial table")
    return RunResult(run.dir.path, summary)


def _disk_full(run: Run, exc: OSError) -> OSError:
    """ENOSPC as one line: where the run is, what it keeps (the iterations up to its last checkpoint) and how to go
    on. JSONL lines that did not fit were cut back and JSON files are replaced whole, so nothing kept is torn."""
    done = _kept(run)
    kept = f"keeps iterations 1..{done}" if done else "keeps its configuration but no finished iteration"
    cache = run.session.cache if run.session is not None else None
    if cache is not None and exc.filename == str(cache.dir):  # the answer cache may sit on another disk
        return OSError(exc.errno, f"disk full while writing the answer cache {cache.dir}; the run directory "
                       f"{run.dir.path} {kept} (resume with `train --resume {run.dir.path} --no-cache`, or without "
                       "--no-cache once the cache has room)")
    return OSError(exc.errno, f"disk full while writing {exc.filename or 'the run directory'}; the run directory "
                   f"{run.dir.path} {kept} (resume with `train --resume {run.dir.path}` once there is room)")


def _kept(run: Run) -> int:
    """The last iteration the run directory keeps (its last checkpoint's)."""
    return int(run.committed["iteration"]) if run.committed is not None else 0


def train(cfg: TrainConfig, log: Callable[[str], None] | None = None, *, limiter: CallLimiter | None = None,
          budget: Budget | None = None) -> RunResult:
    """Start a run for ``cfg``; returns its directory and summary.

    ``limiter`` and ``budget`` replace the run's own call limiter and budget, so that several runs (a sweep) can
    share one provider limit and one spending ceiling. The run directory is locked while the run writes it
    (:class:`~llm_policy_gen.locks.FolderLock`).
    """
    with ExitStack() as held:
        return _train(cfg, log, held, limiter=limiter, budget=budget)


def _train(cfg: TrainConfig, log: Callable[[str], None] | None, held: ExitStack, *, limiter: CallLimiter | None,
           budget: Budget | None) -> RunResult:
    spec = resolve_spec(cfg)
    if spec.train_defaults:
        cfg = cfg.with_env_defaults(spec.train_defaults)
    notes: list[str] = []
    if cfg.backend is None:
        name, why = default_backend_spec()
        cfg = cfg.updated({"backend": name}, "default backend")
        notes.append(f"backend: {name} ({why})")
    parse_backend_spec(cfg.backend or "offline")
    if cfg.mode not in MODES:
        raise MODES.unknown(cfg.mode)
    if cfg.output_format != "auto":
        if cfg.output_format not in FORMATS:
            raise FORMATS.unknown(cfg.output_format, accepted=["auto", *table_format_names()])
        if FORMATS.entry(cfg.output_format).info.get("table") is False:
            raise UserError(f"bad --output-format {cfg.output_format!r}: it answers one action, not a table; accepted: "
                            f"auto, {', '.join(table_format_names())}")
    mode: Mode = MODES.load(cfg.mode)()
    name, _ = parse_backend_spec(cfg.backend or "offline")
    if name == "offline":
        notes.append("backend: offline -- a deterministic optimiser, NOT an LLM (the baseline every LLM must beat)")
    if cfg.temperature is not None and not is_llm(name):
        notes.append(f"note: --temperature has no effect on {name} (no language model is sampled)")
    load_prices(cfg.prices_file)  # a missing or broken price file is refused before anything starts
    with HeldInterrupts(raise_after=False) as starting:  # never a run directory without its config.json
        run_dir = RunDir.create(Path(cfg.logs_dir), spec.env_id, cfg.backend or name, cfg.seed, cfg.run_id)
        held.enter_context(FolderLock(run_dir.path, "the run directory"))  # released when the run ends, however
        # What a resume needs, at once: a run killed from here on can be resumed (the full record follows below).
        write_json_atomic(run_dir.config, {"package": "llm-policy-gen", "version": __version__, "seed": cfg.seed,
                                           "mode": mode.name, "config": cfg.to_dict(), "env_spec": spec.to_dict()})
    if starting.pending:
        raise RunInterrupted(str(run_dir.path), 0)
    console = _console(cfg, spec.env_id, name, mode.name, log)
    for n in notes:
        console.notice(n)
    try:
        run = Run(cfg, spec, mode, run_dir, console, limiter=limiter, budget=budget)
    except BaseException:
        console.close()
        _remove_unstarted(run_dir)
        raise
    write_json_atomic(run_dir.config, _config_record(run))
    try:
        run.mode_start()
    except KeyboardInterrupt:
        console.close()
        run.collector.close()
        raise RunInterrupted(str(run_dir.path), 0) from None
    except BaseException:
        console.close()
        run.collector.close()
        raise
    return _execute(run, 1)


def _remove_unstarted(run_dir: RunDir) -> None:
    """A run refused before it started (a bad backend, a missing key) leaves no directory behind."""
    try:
        for name in (run_dir.config.name, *LOCK_FILES):
            (run_dir.path / name).unlink(missing_ok=True)
        (run_dir.path / "policies").rmdir()
        run_dir.path.rmdir()
        run_dir.path.parent.rmdir()  # logs/<env-id>/, when this run was its only one
    except OSError:
        pass


def _console(cfg: TrainConfig, env_id: str, backend: str, mode: str, log: Callable[[str], None] | None) -> Console:
    # LLM clients and replay (a model's recorded calls) count calls, tokens and cost; the other backends propose.
    return Console(cfg.iterations, f"{env_id} [{backend}{'' if mode == 'table' else ', ' + mode}]",
                   enabled=cfg.progress and log is None, quiet=cfg.quiet, sink=log, is_llm=is_client(backend))


def _check_resume_env(rd: RunDir, record: dict[str, Any], spec: EnvSpec, given: str | None) -> None:
    """A ``module:EnvId`` run imports its module only when ``--env`` names it again; a module that cannot be
    imported (or an environment gymnasium cannot make) is one line, before any file of the run changes."""
    from .envs.make import make_env
    from .envs.registry import check_env_named

    settings = record.get("config")
    recorded = settings.get("env_id") if isinstance(settings, dict) else None
    check_env_named(str(recorded or spec.env_id), given, f"the run {rd.path}", spec.env_id)
    make_env(spec).close()


def _check_resume_endpoint(rd: RunDir, record: dict[str, Any], given: str | None) -> None:
    """A run directory may come from someone else: its recorded ``--base-url`` is where a resume would send the
    user's key. One that is not on this machine must be named again (``--base-url``, the same URL); a
    ``--base-url`` other than the recorded one is refused."""
    config = record.get("config")
    recorded = config.get("base_url") if isinstance(config, dict) else None
    recorded = without_userinfo(recorded) if isinstance(recorded, str) and recorded.strip() else None
    if given is not None:
        if recorded is None or without_userinfo(given) != recorded:
            was = f"was made with --base-url {redact(recorded)}" if recorded else "was made without --base-url"
            raise UserError(f"--base-url {redact(without_userinfo(given))} differs from the run's endpoint: {rd.path} "
                            f"{was}; resume it with the same --base-url, or start a new run")
        return
    if recorded is not None and not is_loopback_url(recorded):
        raise UserError(f"{rd.path} sends its calls to {redact(recorded)} (recorded in its config.json), not this "
                        f"machine; resuming would send your key there: if you trust it, add --base-url "
                        f"{redact(recorded)} (with user:password@ if it needs one)")


def _check_resume_paths(rd: RunDir, settings: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A run directory may come from someone else: a price file it names is read, and an answer cache folder it names
    is written to, only when the command line names the same one (``--prices FILE``; the cache folder by a sweep
    that resumes its own runs), or, for the cache, not at all (``--no-cache``). Pops the path overrides it accepts."""
    prices, given_prices = settings.get("prices_file"), overrides.pop("prices_file", None)
    if given_prices is not None and given_prices != prices:
        raise UserError(f"--prices {given_prices} differs from the run's price file ({prices or 'the shipped one'}); "
                        "resume it with the same --prices, or start a new run")
    if prices is not None and given_prices is None:
        raise UserError(f"{rd.config} names the price file {prices}: a file a run directory names is read only when "
                        f"the command line names it too; add --prices {prices} if you trust it")
    cache_dir, given_cache = settings.get("cache_dir"), overrides.pop("cache_dir", None)
    if given_cache is not None and given_cache != cache_dir:
        raise UserError(f"the answer cache folder {given_cache} differs from the run's ({cache_dir or 'the default'})")
    caching = settings.get("cache", True) is not False and overrides.get("cache") is not False
    if cache_dir is not None and given_cache is None and caching:
        raise UserError(f"{rd.config} names the answer cache folder {cache_dir}: a folder a run directory names is "
                        "not written to on resume; add --no-cache (the run's recorded calls are still reused)")


def _check_records_within(rd: RunDir, done: int, has_checkpoint: bool) -> None:
    """Resuming drops what follows the checkpoint (the unfinished iteration's events, and its calls past the ones it
    reuses): refuse when the files record more than that, as when ``checkpoint.npz`` was deleted or replaced by an
    older one, rather than cut recorded iterations and paid calls."""
    def last(path: Path) -> int:
        return max((int(r.get("iteration", 0)) for r in read_jsonl(path)), default=0) if path.is_file() else 0

    events, calls = last(rd.events), last(rd.transcripts)
    if events > done + int(has_checkpoint) or calls > done + 1:
        what = f"no {rd.checkpoint.name}" if not has_checkpoint else f"a {rd.checkpoint.name} of iteration {done}"
        raise UserError(f"{rd.path} records {max(events, calls)} iterations but has {what}; resuming would drop "
                        "recorded iterations and calls, so it is refused and every file is left as it is (start a "
                        f"new run, e.g. `train --config {rd.config}`)")


def resume(run_dir: Path, overrides: dict[str, Any] | None = None, log: Callable[[str], None] | None = None, *,
           limiter: CallLimiter | None = None, budget: Budget | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its last checkpoint (see the module docstring); a run directory that
    another process is writing is refused (:class:`~llm_policy_gen.locks.FolderBusy`) before anything changes."""
    with ExitStack() as held:
        return _resume(run_dir, overrides, log, held, limiter=limiter, budget=budget)


def _resume(run_dir: Path, overrides: dict[str, Any] | None, log: Callable[[str], None] | None, held: ExitStack, *,
            limiter: CallLimiter | None, budget: Budget | None) -> RunResult:
    from .config import load_config_file

    rd = RunDir(Path(run_dir))
    if not rd.path.is_dir():
        raise UserError(f"{run_dir} does not exist; give the run directory `train` printed")
    if not rd.config.is_file():
        raise UserError(f"{run_dir} is not a run directory (no config.json); give the folder `train` printed")
    rd.check_no_links()  # nothing is deleted or written through a link (the lock's own files included)
    held.enter_context(FolderLock(rd.path, "the run directory"))
    record = read_json(rd.config)
    try:
        spec = EnvSpec.from_dict(record["env_spec"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{rd.config} cannot be read as a run's config.json: {exc}") from None
    overrides = dict(overrides or {})
    given_url = overrides.pop("base_url", None)
    _check_resume_env(rd, record, spec, overrides.pop("env_id", None))
    _check_resume_endpoint(rd, record, given_url)
    settings = load_config_file(rd.config)
    _check_resume_paths(rd, settings, overrides)
    bad = sorted(set(overrides) - set(RESUME_OPTIONS))
    if bad:
        raise UserError(f"--resume takes the run's own settings; {option_name(bad[0])} cannot change (accepted "
                        f"with --resume: {', '.join(option_name(o) for o in RESUME_OPTIONS)})")
    if given_url:  # the same endpoint, with the password config.json never holds
        settings["base_url"] = given_url
    settings["run_id"] = rd.path.name
    settings["logs_dir"] = str(rd.path.parent.parent)
    cfg = TrainConfig.build((settings, f"{rd.config}"), (dict(overrides or {}), "command line"))
    if rd.summary.is_file():
        done = read_json(rd.summary)
        if not isinstance(done, dict):
            raise UserError(f"{rd.summary} does not hold a JSON object; it is not a run's summary.json")
        finished = done.get("stop_reason") not in ("interrupted",) and not str(done.get("stop_reason", "")
                                                                                ).startswith("failed")
        if finished and int(done.get("iterations", 0)) >= cfg.iterations:
            raise UserError(f"{run_dir} already finished ({done.get('stop_reason')}, {done.get('iterations')} "
                            "iterations); give a larger --iterations to extend it")
    load_prices(cfg.prices_file)  # before anything in the run directory changes
    mode: Mode = MODES.load(cfg.mode)()
    state = load_checkpoint(rd.checkpoint) if rd.checkpoint.is_file() else None
    done_iter = int(state["iteration"]) if state is not None else 0
    _check_records_within(rd, done_iter, state is not None)
    torn: list[str] = []  # a last line cut by a kill: dropped, and said
    recorded, kept_lines = RecordedCalls.from_transcript(rd.transcripts, done_iter, on_torn=torn.append)
    events = [e for e in read_jsonl(rd.events, on_torn=torn.append) if int(e.get("iteration", 0)) <= done_iter] \
        if rd.events.is_file() else []
    rewrite_jsonl(rd.transcripts, kept_lines)
    rewrite_jsonl(rd.events, events)
    for p in (rd.path / "policies").glob("iter_*.json"):
        if int(p.stem.split("_")[1]) > done_iter:
            p.unlink()
    rd.summary.unlink(missing_ok=True)
    name, _ = parse_backend_spec(cfg.backend or "offline")
    console = _console(cfg, spec.env_id, name, mode.name, log)
    console.notice(f"resuming {rd.path} after iteration {done_iter}"
                   + (f" ({len(recorded)} recorded calls of the unfinished iteration reused)" if len(recorded) else ""))
    for text in torn:
        console.notice(f"note: {text}")
    if record.get("version") != __version__:
        console.notice(f"note: {rd.path} was made by llm-policy-gen {record.get('version') or '(unknown version)'}; "
                       f"it goes on with version {__version__}")
    run = Run(cfg, spec, mode, rd, console, recorded=recorded, resumed=state is not None, limiter=limiter,
              budget=budget)
    if state is None:
        run.mode_start()
    else:
        run.load_state_dict(state)
        run.committed = state
        run.save_best()
    return _execute(run, done_iter + 1)
