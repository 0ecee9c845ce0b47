"""The report of ``bench/lm_features.py`` (issue 31 item 4): per task the features table (rliable's IQM of the final
held-out means with its 95 % interval, seeds at the threshold, median learner and environment steps to it), the
references on the same held-out seeds (the spec's table before any episode, the zero-shot tables, a model writing
the table) and a figure of the curves against environment steps. It reads records and runs nothing but the
references' zero-episode scoring (``bench/suite_scores.py``, kept in ``OUT/priors.json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def first_reaching(record: dict[str, Any], axis: str) -> float | None:
    """The ``axis`` steps at which the kept table's held-out mean first reached the run's threshold."""
    threshold = record.get("threshold")
    curve = record.get("curve") or {}
    if threshold is None:
        return None
    if axis not in curve:
        return None
    return next((x for x, y in zip(curve[axis], curve["heldout"], strict=True) if y >= threshold), None)


def table_rows(records: list[dict[str, Any]], groups: list[tuple[str, str]]) -> list[str]:
    """Markdown rows, one per (group key, label): IQM [95 % CI] of the final held-out means, seeds at the threshold,
    median learner and environment steps to it, median wall seconds."""
    from llm_policy_gen.plotting.stats import iqm_interval, median_censored

    rows = ["| features | runs | IQM of final held-out [95% CI] | reached threshold | median learner steps to it "
            "| median env steps to it | median wall s |", "|---|---|---|---|---|---|---|"]
    for key, label in groups:
        mine = [r for r in records if r["group"] == key and "heldout" in r]
        if not mine:
            continue
        interval = iqm_interval([r["heldout"] for r in mine])
        lm = median_censored([first_reaching(r, "lm_steps") for r in mine])
        env = median_censored([first_reaching(r, "env_steps") for r in mine])
        reached = sum(first_reaching(r, "env_steps") is not None for r in mine)
        wall = sorted(r["wall_s"] for r in mine)[len(mine) // 2]
        rows.append(f"| {label} | {len(mine)} | {interval.format(2)} | {reached}/{len(mine)} | "
                    f"{'-' if lm is None else f'{lm:,.0f}'} | {'-' if env is None else f'{env:,.0f}'} | {wall:,.0f} |")
    return rows


def reference_rows(task: Any, seeds: list[int], threshold: float | None, out: Path,
                   zero_shot: list[dict[str, Any]], table_writing: dict[str, Any] | None) -> list[str]:
    """Markdown rows of what needs no training run here, on the same held-out seeds: the spec's prior (or the
    default-action table) with zero episodes (``bench/suite_scores.py``, kept in ``out/priors.json``), each model's
    zero-shot table (``bench/lm_zero_shot.py --run-seeds`` JSON files) and a model writing the table
    (``--table-writing``)."""
    import suite_scores

    from llm_policy_gen.plotting.stats import iqm_interval
    from llm_policy_gen.suites.summary import seeds_text as _seeds_text

    def row(label: str, values: dict[int, float], episodes: str, source: str) -> str:
        reached = "-" if threshold is None else f"{sum(v >= threshold for v in values.values())}/{len(values)}"
        return (f"| {label} | {_seeds_text(list(values))} | {iqm_interval(list(values.values())).format(2)} | "
                f"{reached} | {episodes} | {source} |")

    rows = ["| method | seeds | held-out: IQM [95% CI] | reached threshold | episodes | source |",
            "|---|---|---|---|---|---|"]
    if seeds:
        prior = suite_scores.priors(out, [(task.key, task.env_id, s) for s in seeds])[task.key]
        rows.append(row("the spec's table before any episode", {s: prior[s] for s in seeds}, "0",
                        suite_scores.prior_kind(task.env_id)))
    for figures in zero_shot:
        res = next((r for r in figures["results"] if r["env"] == task.env_id), None)
        by_seed = ((res or {}).get("tables", {}).get("zero-shot (word)") or {}).get("by_seed")
        if by_seed:
            name = Path(figures["model"]["path"]).name
            rows.append(row(f"zero-shot table, {name}", {int(k): v for k, v in by_seed.items()}, "0",
                            "`--lm-head scores`, no update, `word` normalisation (`bench/lm_zero_shot.py`)"))
    writing = (table_writing or {}).get("tasks", {}).get(task.key)
    if writing and table_writing:
        episodes = sorted(writing.get("episodes_by_seed", {}).values())
        rows.append(row(f"{table_writing['model']} ({table_writing['quantisation'].split()[0]}) writing the table, "
                        f"`{writing['answer']}` answers", {int(k): v for k, v in writing["by_seed"].items()},
                        f"{episodes[len(episodes) // 2]:,} (median)" if episodes else "-",
                        f"{table_writing['settings']}; {table_writing['transport']}; measured "
                        f"{table_writing['measured']} (`{table_writing['command']}`)"))
    return rows if len(rows) > 2 else []


def plot_task(records: list[dict[str, Any]], groups: list[tuple[str, str]], out: Path, title: str) -> Path | None:
    """Median and interquartile band of each group's curves against environment steps."""
    from llm_policy_gen.sweep.figures import plot_curves
    from llm_policy_gen.sweep.results import Curve

    # the legend's short form of a table's label (the legend cuts a label over 40 characters from the left)
    labels = {key: label.replace("-Instruct", "").replace(": the table-writing optimiser", "") for key, label in groups}
    curves = [Curve(labels[r["group"]], int(r["seed"]), r["curve"]["env_steps"], r["curve"]["heldout"])
              for r in records if r.get("curve") and r["group"] in labels]
    if not curves:
        return None
    threshold = next((r["threshold"] for r in records if r.get("threshold") is not None), None)
    order = [labels[key] for key, _ in groups if any(c.backend == labels[key] for c in curves)]
    return plot_curves(curves, out, title, order, threshold,
                       x_label="environment steps (learner rollouts + test, confirmation and held-out episodes)")


def markdown(records: list[dict[str, Any]], command: str, note: str, tasks: Sequence[Any],
             groups: list[tuple[str, str]], references: dict[str, list[str]] | None = None) -> str:
    lines = ["## Language-model features against one-hot and random features (issue 31 item 4)", "",
             f"Regenerate: `{command}`", "", note, ""]
    for task in tasks:
        mine = [r for r in records if r["task"] == task.key]
        if not mine:
            continue
        trained = [r for r in mine if "heldout" in r and r["features"] != "offline"]
        learner = next((r["learner"] for r in trained if r.get("learner")), "?")
        seeds = sorted({r["seed"] for r in trained})
        updates = sorted({r["iterations"] for r in trained})
        offline = sorted({r["budget"] for r in mine if r["features"] == "offline" and "budget" in r})
        threshold = next((r['threshold'] for r in mine if r.get('threshold') is not None), 'none')
        lines += [f"### {task.env_id}", "",
                  (f"{learner}, {', '.join(map(str, updates))} updates of 256 steps, seeds {seeds}. " if trained
                   else "")
                  + (f"`offline`: the suite's settings, {', '.join(map(str, offline))} episodes. " if offline else "")
                  + f"Threshold {threshold}. Figure: `{task.key}.png`.", "", *table_rows(mine, groups), ""]
        problems = [r for r in mine if "heldout" not in r]
        lines += [f"- {r['features']} seed {r['seed']}: {r.get('error') or r.get('not_run')}" for r in problems]
        if problems:
            lines.append("")
        reference = (references or {}).get(task.key)
        if reference:
            lines += ["References on the same held-out seeds: the table before any episode, the models' zero-shot "
                      "tables, and a model writing the table (measured before, not by this script):", "",
                      *reference, ""]
    return "\n".join(lines)


def write_report(out: Path, records: list[dict[str, Any]], command: str, note: str, tasks: Sequence[Any],
                 groups: list[tuple[str, str]], zero_shot: list[dict[str, Any]] | None = None,
                 table_writing: dict[str, Any] | None = None) -> Path:
    """``out/lm_features.md`` and a figure per task; ``tasks``: the bench's task list, ``groups``: each features
    key with its label, in the tables' order."""
    references = {}
    for task in tasks:
        mine = [r for r in records if r["task"] == task.key]
        plot_task(mine, groups, out / f"{task.key}.png",
                  f"{task.env_id}: kept table's held-out mean, median and IQR over seeds")
        seeds = sorted({r["seed"] for r in mine if "heldout" in r})
        threshold = next((r["threshold"] for r in mine if r.get("threshold") is not None), None)
        references[task.key] = reference_rows(task, seeds, threshold, out, zero_shot or [], table_writing)
    md = out / "lm_features.md"
    md.write_text(markdown(records, command, note, tasks, groups, references) + "\n")
    return md
