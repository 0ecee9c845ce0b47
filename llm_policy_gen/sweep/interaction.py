"""Whether the methods of one comparison ran at equal interaction: the budget a sweep gave, and a warning when the
runs of its backends counted unequal experience.

A comparison ranks methods by what they reached; a method that interacted with the environment ten times longer
ranks higher for that alone. The runs' interaction is counted the way their summaries count it (``episodes_total``
and ``env_steps_total``: training, test and confirmation episodes, held-out ones not counted). The measure compared is
the one the sweep budgeted: steps, unless it gave only ``--max-episodes`` (in CartPole a better table makes longer
episodes, so equal episodes are unequal steps by design). Backends whose mean over their runs differ by more than
:data:`TOLERANCE` of the smallest are unequal; ``results.md``, the report and the paper's table say so, and ``compare``
prints it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..loggers.console import plural
from ..run.stop import StopKind
from .results import ResultRow, backend_stats

__all__ = ["TOLERANCE", "measure", "budget_text", "unequal_interaction"]

TOLERANCE = 0.10
"""How far above the smallest backend's mean counted interaction another backend's may be before the table is said
to compare unequal experience (10%)."""


def measure(settings: Mapping[str, Any]) -> str:
    """``"steps"``, or ``"episodes"`` where the sweep's settings give an episode budget and no step budget."""
    return "episodes" if settings.get("max_episodes") is not None and settings.get("max_steps") is None else "steps"


def budget_text(settings: Mapping[str, Any]) -> str | None:
    """``"at most 50,000 environment steps per run (--max-steps)"`` for the budgets ``settings`` give, or None."""
    parts = [f"{settings[key]:,} {word} (`{flag}`)" for key, word, flag in (
        ("max_steps", "environment steps", "--max-steps"), ("max_episodes", "episodes", "--max-episodes"))
        if isinstance(settings.get(key), int)]
    if not parts:
        return None
    return (f"at most {' and '.join(parts)} per run, counted as the summaries count them; each run stops at the first "
            "iteration boundary at or past it, so it may go past by up to one iteration")


def unequal_interaction(rows: Sequence[ResultRow], backends: Sequence[str] | None,
                        settings: Mapping[str, Any]) -> str | None:
    """The warning when the backends' mean counted interaction (the :func:`measure` of ``settings``) over their runs
    with a result differ by more than :data:`TOLERANCE`; None when they do not, or fewer than two backends have
    results."""
    what = measure(settings)
    means = {s.name: (s.steps if what == "steps" else s.episodes) for s in backend_stats(rows, backends) if s.ok}
    if len(means) < 2:
        return None
    low, high = min(means.values()), max(means.values())
    if high <= low * (1 + TOLERANCE):
        return None
    word = "environment steps" if what == "steps" else "episodes"
    listed = ", ".join(f"{b} {v:,.0f}" for b, v in means.items())
    text = (f"unequal interaction: the backends' mean counted {word} per run differ by more than "
            f"{100 * TOLERANCE:.0f}% ({listed}), so this table compares unequal experience")
    flag = "--max-steps" if what == "steps" else "--max-episodes"
    if settings.get("max_steps" if what == "steps" else "max_episodes") is None:
        return f"{text}; give {flag} N (and --iterations large enough) to run every backend at the same budget"
    early = _before_budget(rows)
    if early:
        return (f"{text}; runs that ended before the budget: {early}; give a larger --iterations (or --patience) so "
                f"that {flag} ends every run")
    return f"{text}; each run's overshoot past the budget (up to one iteration) differs: give a larger {flag}"


def _before_budget(rows: Sequence[ResultRow]) -> str:
    """``"q-learning 3 of 3 runs (iterations done)"``: the runs with a result that no budget stopped."""
    budgets = (StopKind.STEPS, StopKind.EPISODES)
    counts: dict[str, list[int]] = {}
    why: dict[str, set[str]] = {}
    for r in (r for r in rows if r.ok):
        early = r.stop is None or r.stop.kind not in budgets
        counts.setdefault(r.name, [0, 0])[1] += 1
        if early:
            counts[r.name][0] += 1
            why.setdefault(r.name, set()).add(r.stop.kind.value if r.stop is not None else "no stop reason")
    return ", ".join(f"{b} {n} of {plural(total, 'run')} ({', '.join(sorted(why[b]))})"
                     for b, (n, total) in counts.items() if n)
