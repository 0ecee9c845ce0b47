"""``results.md``: a sweep's results as a markdown page, from :func:`~.results.backend_stats` per backend.

The table (the counted episodes and steps per run, rliable's interquartile means and intervals of the held-out returns
and the normalised scores, the solve rates, calls, tokens, cost and wall time per backend), a warning when its
backends ran at unequal interaction (:mod:`.interaction`), what every run shared (settings, interaction budget,
provider limits, budget in USD), how each number was computed, and the runs that failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from ..loggers.console import plural
from ..plotting.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from ..run.stop import StopKind
from ..schema.aliases import file_key
from .interaction import TOLERANCE, budget_text, unequal_interaction
from .results import BackendStats, ResultRow, SweepRecord, backend_stats

__all__ = ["results_markdown", "calls_cell", "wall_cell"]


def _f(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:,.{digits}f}"


def results_markdown(record: SweepRecord, rows: Sequence[ResultRow], random: Mapping[int, float] | None = None) -> str:
    """The text of ``results.md`` (``random``: the uniform random policy's held-out mean per run seed)."""
    goal = record.reward_threshold
    lines = [
        f"# Comparison on {record.env_id}",
        "",
        f"Seeds {record.seeds_text} ({plural(len(record.seeds), 'run')} per backend), "
        f"{plural(record.iterations or 0, 'iteration')} per run. Command: `{record.command}`",
        "",
        *_settings_lines(record, rows),
        "| backend | LLM | runs ok | episodes / run | steps / run | IQM held-out return [95% CI] | IQM normalised "
        "score [95% CI] | median episodes to solve | solve rate | calls / run | tokens / run | cost USD (total) | "
        "wall s / run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in backend_stats(rows, record.backends, random, goal):
        med = "not reached" if s.median_episodes_to_solve is None else f"{s.median_episodes_to_solve:,.0f}"
        rate = "n/a" if not np.isfinite(s.solve_rate) else f"{100 * s.solve_rate:.0f}%"
        lines.append(
            f"| {s.name} | {'yes' if s.is_llm else 'no'} | {s.ok}/{s.runs} | {_f(s.episodes, 0)} | "
            f"{_f(s.steps, 0)} | {s.returns.format(1)} | "
            f"{s.score.format(2) if s.score is not None else 'n/a'} | {med} | "
            f"{rate} | {calls_cell(s)} | {_f(s.tokens, 0)} | {s.cost_usd:.4f} | {wall_cell(s)} |"
        )
    warning = unequal_interaction(rows, record.backends, record.settings)
    if warning:
        lines += ["", f"**Warning: {warning}.**"]
    lines += [
        "",
        "- Episodes / run, steps / run: the environment episodes and steps each run counted (training, test and "
        "confirmation; held-out ones not counted: `episodes_total`, `env_steps_total`), mean over the runs with a "
        f"result. The table warns when backends differ by more than {100 * TOLERANCE:.0f}% in the budgeted measure "
        "(steps, or episodes under `--max-episodes` alone).",
        f"- IQM held-out return: each run's kept table's mean return on {record.heldout_episodes} held-out episodes "
        f"(`{file_key('best_heldout_mean')}` of its summary); across seeds rliable's interquartile mean (the mean of "
        "the middle half of the runs) with a 95% stratified bootstrap interval "
        "(`rliable.library.get_interval_estimates`, "
        f"{DEFAULT_RESAMPLES:,} resamples, seed {DEFAULT_SEED}). With few seeds the interval is optimistic (narrow).",
        _score_note(goal, random),
        "- Median episodes to solve: environment episodes (training + test + confirmation, held-out excluded) "
        "until the kept table's held-out mean first reached the reward threshold; runs that never solved count as "
        "never solving, so the median is \"not reached\" when half the runs or more did not solve.",
        "- Calls: calls to the backend, those the answer cache answered counted too and said in brackets "
        "(\"from the cache\"). Methods with LLM = no (the offline optimiser, kept-table-q, random, and modes that "
        "build no backend, such as q-learning) are not language models; their calls cost nothing.",
        "- Wall s / run: mean wall time of the runs with a result, leaving out runs whose every call was answered "
        "from the answer cache (their time says nothing of the method's); the brackets say how many were left out.",
        "- Curves: `curves.png` (median and interquartile band over seeds of the kept table's held-out mean "
        "against environment episodes; a backend's curve ends where its shortest run ended).",
    ]
    failed = [r for r in rows if not r.ok]
    if failed:
        lines += ["", "## Failed runs", "",
                  "Runs without a result: their numbers are in no line above. Running the same command again resumes "
                  "them from their checkpoints.", ""]
        lines += [f"- {r.name} seed {r.seed} ({r.status}): {r.error}" for r in failed]
    return "\n".join(lines) + "\n"


def calls_cell(s: BackendStats) -> str:
    """Calls per run, with those the answer cache answered: ``4.0 (4.0 from the cache)``."""
    return _f(s.calls, 1) + (f" ({_f(s.cached_calls, 1)} from the cache)" if s.cached_calls else "")


def wall_cell(s: BackendStats) -> str:
    """Wall s per run of the runs that made real calls: ``n/a (2 runs all from the cache)`` when none did."""
    if not s.cached_runs:
        return _f(s.wall_s, 1)
    return f"{_f(s.wall_s, 1)} ({plural(s.cached_runs, 'run')} all from the cache left out)"


def _score_note(goal: float | None, random: Mapping[int, float] | None) -> str:
    if goal is None:
        return "- IQM normalised score: n/a, the task has no goal (no reward threshold) to normalise by."
    if not random:
        return "- IQM normalised score: n/a, the uniform random policy's return was not measured."
    lo, hi = min(random.values()), max(random.values())
    spread = f"{lo:,.2f}" if lo == hi else f"{lo:,.2f} to {hi:,.2f}"
    return ("- IQM normalised score: `(return - R) / (goal - R)` per run, goal the reward threshold "
            f"{goal:g} and R the uniform random policy's mean return on that run's held-out seeds ({spread}; "
            "`random_policy.json`; not the `random` backend, a random search): 0 is acting at random, 1 the goal; "
            "IQM and interval as above. No ratio of returns is reported.")


def _settings_lines(record: SweepRecord, rows: Sequence[ResultRow]) -> list[str]:
    """What every run shared: the settings given, the provider limits and the budget (and what it stopped)."""
    given = {k: v for k, v in record.settings.items()
             if k not in ("iterations", "budget_usd", "max_steps", "max_episodes")}
    lines = []
    interaction = budget_text(record.settings)
    if interaction:
        lines.append(f"Interaction budget: {interaction}.")
    if given:
        lines.append("Settings of every run: " + ", ".join(f"`{k}` = {json.dumps(v)}" for k, v in sorted(given.items()))
                     + " (the rest are the defaults; `compare.json` holds them all).")
    limits = record.limits
    if limits:
        rpm = f"at most {limits['rpm']:g} call starts a minute" if limits.get("rpm") else "no rate limit"
        lines.append(f"Provider limits shared by all runs: at most {limits['max_concurrent_calls']} calls in flight "
                     f"per provider, {rpm}.")
    if limits.get("budget_usd") is not None:
        stopped = [r for r in rows if r.ok and r.stop is not None and r.stop.kind is StopKind.BUDGET]
        cost = sum(float(r.cost_usd or 0) for r in rows)
        text = (f"Budget: USD {limits['budget_usd']:.4f} for the whole sweep (`--budget-usd`); its runs cost USD "
                f"{cost:.4f} in all (USD {limits.get('spent_usd', cost):.4f} counted by the budget).")
        if stopped:
            names = ", ".join(f"{r.name} seed {r.seed} after {r.iterations}" for r in stopped)
            text += (f" {plural(len(stopped), 'run')} ended when the next call could have passed it (stop reason "
                     f"\"{stopped[0].stop_reason}\"): {names} iterations; their numbers come from fewer "
                     "iterations than asked for.")
        else:
            text += " No run was stopped by it."
        lines.append(text)
    return [*lines, ""] if lines else []
