"""A run's records, written in one place: the iteration's ``events.jsonl`` line, ``summary.json`` and
``config.json`` (the counters and the checkpoint state are :mod:`.counters`).

The records stay JSON objects on disk (the outside contract names their keys); they are typed
(:class:`~.schema.Event`, :class:`~.schema.Summary`, declared once in :mod:`.schema`, under the code's names:
``test_*`` for the test seeds, ``heldout_*`` for the held-out ones) and filled here; :mod:`.files` writes and reads
them, and :mod:`llm_policy_gen.schema.aliases` gives them the keys the files carry. A mode adds its own event keys
through :attr:`~llm_policy_gen.modes.base.Step.fields`; a key the run writes itself may be replaced only where the
mode declares it (:data:`MODE_MAY_SET`), anything else is refused rather than overwritten silently.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import __version__
from ..clients.base import ClientSettings
from ..clients.keys import redact
from ..clients.usage import Usage
from ..collect import Rollouts
from ..modes.base import Step, tables_per_iteration
from ..modes.selection import KEEPER, counting_of, keeper_is_method, select_of
from ..prompting.context import HistoryEntry
from ..storage.templates import prompts_source
from .schema import Event, Summary
from .stop import StopReason

if TYPE_CHECKING:
    from .services import Run

__all__ = ["Event", "Summary", "RunResult", "MODE_MAY_SET", "event_record", "summary_record",
           "config_record", "heldout_returns"]


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    """What ``summary.json`` holds (the file's keys: :func:`~llm_policy_gen.schema.aliases.summary_in` gives the
    code's names)."""


#: Event keys a mode may set itself, with its reason: direct mode judges batches of its own, not candidates.
MODE_MAY_SET = frozenset({"best_test_mean", "candidates", "validation_errors", "test_episodes"})


def heldout_returns(rollouts: Rollouts) -> list[float]:
    """Held-out returns as logged: 6 significant digits (enough for any paired comparison of them)."""
    return [float(f"{x:.6g}") for x in np.asarray(rollouts.returns, dtype=float)]


def event_record(run: Run, step: Step, iteration: int, t_iter: float, usage: Usage) -> Event:
    """The iteration's events.jsonl line (the history entries of its candidates are added on the way)."""
    v = step.verdict
    answers = step.answers
    if v is not None:
        for k, a in enumerate(answers):
            mean = v.test_means[k] if k < len(v.test_means) else None
            chosen = v.chosen == k
            run.history.append(HistoryEntry(
                iteration, mean, run.keeper.n_test(iteration), v.accepted and chosen,
                a.parsed.n_changed if a.parsed else 0, "; ".join(a.errors)[:200], a.candidate,
                (v.confirmation.passed if v.confirmation is not None else None) if chosen else None))
    test_mean = step.test_mean if step.test_mean is not None else (v.chosen_mean if v else None)
    test_returns = step.test_returns or (v.test_returns[v.chosen] if v is not None and v.chosen is not None else [])
    errors = [f"candidate {a.candidate}: {e}" if len(answers) > 1 else e for a in answers for e in a.errors]
    best_test = run.keeper.test_mean(iteration) if step.verdict is not None else step.fields.get("best_test_mean")
    c, total = run.counters, run.usage
    rec: Event = {
        "iteration": iteration,
        "mode": run.mode.name,
        "train_return": float(np.mean([e.ret for e in step.train_episodes])) if step.train_episodes else None,
        "train_returns": [e.ret for e in step.train_episodes],
        "train_epsilon": step.train_epsilon,
        "test_mean": test_mean,
        "test_returns": list(test_returns),
        "test_episodes": run.keeper.n_test(iteration),
        "candidates": len(answers),
        "candidate_means": list(v.test_means) if v is not None else [],
        "chosen": (v.chosen + 1) if v is not None and v.chosen is not None else None,
        "best_test_mean": best_test,
        "best_heldout_mean": run.heldout_mean,
        "heldout_mean": run.heldout_mean,
        "accepted": bool(step.accepted),
        "accepted_total": c.accepted_count,
        "valid": any(a.ok for a in answers) if answers else True,
        "n_changed": next((a.parsed.n_changed for k, a in enumerate(answers)
                           if a.parsed is not None and v is not None and v.chosen == k), 0),
        "episodes_total": c.episodes_total,
        "env_steps_total": c.steps_total,
        "heldout_episodes_total": c.heldout_total,
        "selection_episodes_total": c.selection_episodes,
        "selection_steps_total": c.selection_steps,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "cost_usd": round(usage.cost_usd, 6),
        "input_tokens_total": total.input_tokens,
        "output_tokens_total": total.output_tokens,
        "cost_usd_total": round(total.cost_usd, 6),
        "cost_complete": total.unpriced_calls == 0,
        "llm_calls": usage.calls,
        "failed_calls": usage.failed_calls,
        "first_call_error": next((a.errors[0] for a in answers if a.failed and a.errors), None),
        "validation_errors": errors,
        "notes": [n for a in answers if a.parsed for n in a.parsed.notes],
        "prompt_chars": c.prompt_sizes[-1] if c.prompt_sizes else None,
        "wall_s": round(time.perf_counter() - t_iter, 4),
    }
    if v is not None and v.confirmation is not None:
        rec["confirmation"] = v.confirmation.to_dict()
    if step.accepted and run.best_heldout is not None:
        rec["heldout_std"] = float(np.std(run.best_heldout.returns))
        rec["heldout_episodes"] = int(run.best_heldout.returns.size)
        rec["heldout_returns"] = heldout_returns(run.best_heldout)
        before = run.replaced_heldout
        if before is not None and np.array_equal(before.seeds, run.best_heldout.seeds):
            # the table it replaced, on the same held-out seeds: an adoption that lowered the held-out mean is
            # counted from the events alone (`llm-policy-gen drift`), also where per-iteration policy files are gone
            rec["heldout_returns_before"] = heldout_returns(before)
    clash = sorted(set(step.fields) & set(rec) - MODE_MAY_SET)
    if clash:
        raise ValueError(f"mode {run.mode.name} sets the event keys {clash}, which the run writes itself")
    out: dict[str, Any] = dict(rec)
    out.update(step.fields)
    return out  # type: ignore[return-value]  # an Event with the mode's own keys


def summary_record(run: Run, stop: StopReason, extra: dict[str, Any] | None = None,
                   state: dict[str, Any] | None = None) -> Summary:
    """``summary.json``; ``state`` (a committed checkpoint state) describes the run as of its last finished
    iteration, so an interrupted run's summary agrees with its files."""
    s = state or run.state_dict()
    held = s["heldout"]
    returns = np.asarray(held["returns"]) if held is not None else None
    sizes = s["prompt_sizes"]
    usage = Usage.from_dict(s["usage"])
    history = s["history"]
    seeds = run.keeper.seeds(max(1, int(s["iteration"])))
    kept = s["keeper"]
    best_returns = dict(zip((int(x) for x in kept["best_seeds"]), (float(x) for x in kept["best_returns"]),
                            strict=True))
    best_test = float(np.mean([best_returns[x] for x in seeds])) if all(x in best_returns for x in seeds) else None
    out: Summary = {
        "env_id": run.spec.env_id,
        "mode": run.mode.name,
        "backend": run.backend_name,
        "model": run.model,
        "is_llm": run.is_llm,
        "seed": run.cfg.seed,
        "candidates": tables_per_iteration(run.mode, run.cfg),
        "best_heldout_mean": float(returns.mean()) if returns is not None and returns.size else None,
        "best_heldout_std": float(np.std(returns)) if returns is not None and returns.size else None,
        "best_heldout_episodes": int(returns.size) if returns is not None else 0,
        "best_test_mean": best_test,
        "best_iteration": int(kept["best_iteration"]),
        "accepted_count": int(s["accepted_count"]),
        "never_accepted": int(s["accepted_count"]) == 0,
        "reward_threshold": run.spec.reward_threshold,
        "solved": s["solved_at"] is not None,
        "episodes_to_solve": s["solved_at"],
        "iteration_solved": s["solved_iteration"],
        "iterations": int(s["iteration"]),
        "episodes_total": int(s["episodes_total"]),
        "env_steps_total": int(s["steps_total"]),
        "heldout_episodes_total": int(s["heldout_total"]),
        "max_episodes": run.cfg.max_episodes,
        "episodes_past_budget": _past(int(s["episodes_total"]), run.cfg.max_episodes),
        "max_steps": run.cfg.max_steps,
        "steps_past_budget": _past(int(s["steps_total"]), run.cfg.max_steps),
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
                                  - {h["iteration"] for h in history
                                     if HistoryEntry.from_dict(h).test_mean is not None}),
        "prompt_chars_first": sizes[0] if sizes else None,
        "prompt_chars_last": sizes[-1] if sizes else None,
        "prompt_chars_max": max(sizes) if sizes else None,
        "stop_reason": stop.text,
        "unreachable_after": run.cfg.options_for(ClientSettings).unreachable_after,
        "wall_s": round(float(s["wall_s"]), 3),
    }
    if state is not None:  # calls of the iteration that did not finish are in the transcript, not the totals
        out["unfinished_iteration_calls"] = run.usage.calls - usage.calls
        out["unfinished_iteration_failed_calls"] = run.usage.failed_calls - usage.failed_calls
    merged: dict[str, Any] = dict(out)
    merged.update(_selection(run, returns, state is not None, s))
    merged.update(extra or {})
    return merged  # type: ignore[return-value]  # a Summary with the mode's own keys


def _selection(run: Run, returns: np.ndarray | None, interrupted: bool, s: dict[str, Any]) -> dict[str, Any]:
    """The summary's selection and counting (:mod:`llm_policy_gen.modes.selection`): what chose the reported policy,
    the counted episodes and steps that chose it, and the final and selected policies' held-out means as far as the
    run itself knows them (a learner's own final measurement, a peer's selection, come from its ending)."""
    select = select_of(run.mode, run.cfg)
    kept = float(returns.mean()) if returns is not None and returns.size else None
    final = kept if keeper_is_method(run.mode) or (select != KEEPER and not interrupted) else None
    return {"select": select, "counting": counting_of(run.mode, run.cfg),
            "selection_episodes_total": s.get("selection_episodes"), "selection_steps_total": s.get("selection_steps"),
            "final_heldout_mean": final, "selected_heldout_mean": kept if select == KEEPER else None}


def _past(total: int, budget: int | None) -> int | None:
    """How far the counted ``total`` went past ``budget`` (the run stops only between iterations), or None when there
    is no budget or it was not reached."""
    return None if budget is None or total < budget else total - budget


def config_record(run: Run) -> dict[str, Any]:
    """``config.json``: the resolved configuration, the environment, the backend's identity and the seed ranges."""
    cfg = run.cfg
    return {
        "package": "llm-policy-gen",
        "version": __version__,
        "seed": cfg.seed,
        "mode": run.mode.name,
        "select": select_of(run.mode, run.cfg),
        **run.mode_facts,
        "config": cfg.to_dict(),
        "env_spec": run.spec.to_dict(),
        "backend": run.describe_backend(),
        "backend_is_llm": run.is_llm,
        "seeds": run.plan.ranges(),
        "argv": [redact(a) for a in sys.argv],
        "prompts": prompts_source(),
    }
