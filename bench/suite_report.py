"""``suite.md``: the goal table and every method per task, as rliable's interquartile means with 95 % stratified
bootstrap intervals over seeds, of the held-out return and of the normalised score (issue 32 item 3); the prior
scored with zero episodes and the neutral-prior ablation beside offline (item 4); the curves and profiles it links.

The normalised score of a run is ``(return - R) / (goal - R)``, ``R`` the uniform random policy's mean on the same
run seed's held-out episodes (``random_policy.json``, :mod:`suite_scores`): 0 acts at random, 1 meets the goal. No
ratio of returns is reported. The goals are judged as issue 20 defined them: the median of the seeds within the
budget, and enough seeds meeting it (``met``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import suite
import suite_curves
import suite_scores
from suite_goals import BY_KEY, GOALS, Goal, fmt, median, seed_stats
from suite_peers import PeerCell

from llm_policy_gen.plotting.stats import iqm_interval, normalized

Scores = Mapping[str, Mapping[int, float]]
"""``{task: {seed: value}}``: the uniform random policy's or the prior's held-out mean."""


def _iv(values: Sequence[float | None], digits: int) -> str:
    vals = [float(v) for v in values if v is not None]
    return iqm_interval(vals).format(digits) if vals else "n/a"


def norm_scores(task: str, pairs: Sequence[tuple[int, float | None]], random: Scores) -> list[float] | None:
    """The normalised scores of ``(seed, return)`` pairs of ``task`` (None: a seed without R, or no span)."""
    have = [(s, v) for s, v in pairs if v is not None]
    r = random.get(task, {})
    if not have or any(s not in r for s, _ in have):
        return None
    got = normalized([v for _, v in have], [r[s] for s, _ in have], BY_KEY[task].goal)
    return None if got is None else [float(x) for x in got]


def _norm_iv(task: str, pairs: Sequence[tuple[int, float | None]], random: Scores) -> str:
    got = norm_scores(task, pairs, random)
    return "n/a" if got is None else iqm_interval(got).format(2)


def _digits(goal: Goal) -> int:
    return 2 if abs(goal.goal) < 10 else 1


def _seeds_text(seeds: Sequence[int]) -> str:
    s = sorted(seeds)
    if not s:
        return "none"
    if s == list(range(s[0], s[-1] + 1)) and len(s) > 1:
        return f"{s[0]}-{s[-1]}"
    return ",".join(map(str, s))


def goal_rows(goal: Goal, rows: list[dict[str, Any]], random: Scores, priors: Scores) -> list[list[str]]:
    """The goal table's lines of one task: one per backend of :data:`suite.BACKENDS` that ran it."""
    out = []
    d = _digits(goal)
    neutral = sorted((r for r in rows if r["backend"] == "offline-neutral" and "heldout" in r), key=lambda r: r["seed"])
    for backend in suite.BACKENDS:
        rs = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["seed"])
        if not rs:
            continue
        task = goal.env_id + "".join(f" --{k.replace('_', '-')} {v}" for k, v in goal.settings)
        goal_txt = (f"{'=' if goal.exact else '>='} {fmt(goal.goal, goal)} (median, and {goal.need} of "
                    f"{len(goal.seeds)} seeds)")
        beside = ["", ""]
        if backend == "offline":
            seeds = [r["seed"] for r in rs]
            prior = priors.get(goal.key, {})
            n_vals = [r["heldout"] for r in neutral]
            with_prior = [s for s in seeds if s in prior]
            beside = [f"{_iv([prior[s] for s in with_prior], d)} (seeds {_seeds_text(with_prior)})",
                      "not run" if not neutral else f"{_iv(n_vals, d)}, met {seed_stats(goal, n_vals)[1]} "
                      f"(seeds {_seeds_text([r['seed'] for r in neutral])})"]
        bad = [r for r in rs if "heldout" not in r]
        if bad:
            why = bad[0].get("error") or bad[0].get("skipped")
            out.append([task, goal_txt, f"{goal.budget:,}", backend, f"not run ({len(bad)} seeds): {why}",
                        *[""] * 9, *beside, goal.today, goal.anchors])
            continue
        held = [r["heldout"] for r in rs]
        worst, met = seed_stats(goal, held)
        within = [r["heldout_within"] for r in rs]
        w_worst, w_met = seed_stats(goal, within)
        reached = [r["reached_at"] for r in rs]
        n_met = sum(x is not None for x in reached)
        reached_txt = f"{median(reached):,.0f}" if n_met == len(rs) else f"- ({n_met}/{len(rs)} seeds)"
        steps = median([r.get("env_steps_total") for r in rs])
        cpu = median([r.get("cpu_s") for r in rs])
        out.append([task, goal_txt, f"{goal.budget:,}", backend,
                    f"**{_iv(held, d)}** (seeds {_seeds_text([r['seed'] for r in rs])})",
                    _norm_iv(goal.key, [(r["seed"], r["heldout"]) for r in rs], random), fmt(worst, goal), met,
                    f"{fmt(median(within), goal)} ({fmt(w_worst, goal)}, {w_met})",
                    f"{median([r['episodes'] for r in rs]):,.0f}", "-" if steps is None else f"{steps:,.0f}",
                    reached_txt, f"{median([r['wall_s'] for r in rs]):,.0f}",
                    "-" if cpu is None else f"{cpu:,.0f}", *beside, goal.today, goal.anchors])
    return out


def method_rows(goal: Goal, runs: Sequence[suite_curves.Run], peers: Sequence[PeerCell],
                random: Scores) -> list[list[str]]:
    """Every method on one task: the prior, the suite's backends, the peers' columns (their hyperparameter
    source, and the seeds whose run has no figure yet)."""
    d = _digits(goal)
    out = []
    mine = [r for r in runs if r.task == goal.key]
    for m in suite_curves.methods(mine):
        rs = sorted((r for r in mine if r.method == m), key=lambda r: r.seed)
        cell = next((c for c in peers if c.task == goal.key and c.column == m), None)
        note = ""
        if cell is not None:
            missing = len(cell.values) - len(rs)
            note = f"{cell.source}" + (f"; {missing} of {len(cell.values)} seeds without a figure (out of reach, "
                                       "failed or running: peers.md)" if missing else "")
        elif m == suite_curves.PRIOR:
            note = suite_scores.prior_kind(goal.env_id)
        finals = [r.final for r in rs]
        worst, met = seed_stats(goal, list(finals))
        steps = median([r.total_steps for r in rs])
        eps = median([r.total_episodes for r in rs])
        out.append([goal.env_id, m, _seeds_text([r.seed for r in rs]), f"**{_iv(finals, d)}**",
                    _norm_iv(goal.key, [(r.seed, r.final) for r in rs], random), fmt(worst, goal), met,
                    "-" if steps is None else f"{steps:,.0f}", "-" if eps is None else f"{eps:,.0f}", note])
    for c in peers:  # a peer column with no figure at all
        if c.task == goal.key and not any(r.method == c.column for r in mine):
            why = c.error or f"no seed reached its budget yet ({c.unreached} of {len(c.values)} out of reach)"
            out.append([goal.env_id, c.column, "none", why, "", "", "", "", "", c.source])
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


GOAL_HEADER = ["task", "goal", "budget", "backend", "held-out: IQM [95% CI] (seeds)", "normalised: IQM [95% CI]",
               "worst", "met", "within budget: median (worst, met)", "episodes used", "env steps", "reached", "wall s",
               "CPU s", "prior, 0 episodes: IQM [95% CI]", "offline-neutral: IQM [95% CI], met", "today", "anchors"]
METHOD_HEADER = ["task", "method", "seeds", "held-out: IQM [95% CI]", "normalised: IQM [95% CI]", "worst", "met",
                 "env steps (median)", "episodes (median)", "source / coverage"]


def markdown(records: list[dict[str, Any]], note: str, peers: Sequence[PeerCell] = (),
             runs: Sequence[suite_curves.Run] = (), random: Scores | None = None, priors: Scores | None = None,
             figures: Mapping[str, str] | None = None) -> str:
    """The page; ``runs``: every method's runs (:mod:`suite_curves`), ``figures``: task (or ``"profiles"``) to the
    image written for it, relative to the page."""
    random, priors, figures = random or {}, priors or {}, figures or {}
    lines = [
        "# Goal table (bench/suite.py)", "", note, "",
        "Every figure is rliable's interquartile mean (IQM: the mean of the middle half of the seeds) with its 95% "
        "stratified bootstrap interval (2,000 resamples, seed 0) over the seeds named, of each run's held-out mean "
        "over 100 episodes (the kept table's, at the end of the run). 'normalised' is the same for (return - R) / "
        "(goal - R), R the uniform random policy's mean on that seed's held-out episodes (random_policy.json; not "
        "the `random` backend, a random search): 0 acts at random, 1 meets the goal. No ratio of returns is "
        "reported. With 10 seeds (5 for the long tasks) the intervals are narrow-biased. 'worst' is the worst seed, "
        "'met' the count of seeds that meet the goal; 'within budget' is the median (worst, met) as of the last "
        "iteration that ended within the budget, the measure the goals are judged on (issue 20); episodes and "
        "environment steps count every episode a run used (training, test, confirmation); 'reached' is the median "
        "episode count at which the kept table's held-out mean first met the goal (- if not in every seed).", "",
        "Beside offline: the spec's prior scored with zero episodes on the same held-out seeds (priors.json: the "
        "table of its prior rule, or the default action everywhere for a spec without one), and `offline-neutral`, "
        "offline started from the neutral prior (`--prior neutral`: no prior rule, every state at the default "
        "action); on a spec without a prior it is the offline run itself.", "",
    ]
    goal_lines: list[list[str]] = []
    method_lines: list[list[str]] = []
    for goal in GOALS:
        rows = [r for r in records if r["task"] == goal.key]
        goal_lines += goal_rows(goal, rows, random, priors)
        method_lines += method_rows(goal, runs, peers, random)
    lines += _table(GOAL_HEADER, goal_lines)
    lines += ["", "## Every method per task", "",
              "The prior (zero episodes), the suite's backends and the peers (bench/peers.py: Stable-Baselines3 "
              "agents with the RL Baselines3 Zoo's hyperparameters for the task, or SB3's defaults labelled "
              "untuned, trained to as many environment steps as offline used on that seed ('= steps'), as many "
              "episodes ('= episodes') or the zoo's own budget; peers.md lists every run). Only runs with a "
              "figure count: the seeds each row covers are named.", ""]
    lines += _table(METHOD_HEADER, method_lines)
    if figures:
        lines += ["", "## Curves and performance profiles", "",
                  "Held-out return against environment steps and against episodes per task (IQM over seeds with its "
                  "95% stratified bootstrap band; data: curves.csv, one line per curve point), and rliable's "
                  "performance profiles of the normalised final scores across tasks (profiles.csv).", ""]
        lines += [f"- {key}: ![{key}]({path})" for key, path in figures.items()]
    return "\n".join(lines) + "\n"


__all__ = ["markdown", "norm_scores", "goal_rows", "method_rows"]
