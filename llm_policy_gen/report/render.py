"""Pages from the templates in ``templates/`` (Jinja2, autoescaped): the views of :mod:`.data` in, HTML out."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import __version__
from ..errors import missing_extra
from ..run.files import CONFIG, SUMMARY
from ..schema.aliases import file_key
from ..storage.runlog import slug
from .data import REPORT_NAME, CompareData, RunData
from .images import file_uri, policy_image, run_curves, seed_curves, usage_curves
from .transcripts import TextStore, build_calls

__all__ = ["Card", "run_cards", "render_run", "render_compare"]


@dataclass
class Card:
    """One summary figure: what it is, its value and how it was measured."""

    label: str
    value: str
    note: str
    cls: str = ""
    key: str = ""
    """The summary.json key it shows (a ``data-key`` attribute of the page)."""


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def num(x: Any, digits: int = 1) -> str:
    return f"{x:,.{digits}f}" if _finite(x) else "n/a"


def count(x: Any) -> str:
    return f"{int(x):,}" if _finite(x) else "-"


def usd(x: Any) -> str:
    return f"${x:,.4f}" if _finite(x) else "n/a"


def signed(x: Any, digits: int = 1) -> str:
    return f"{x:+,.{digits}f}" if _finite(x) else "n/a"


def percent(x: Any) -> str:
    return f"{100 * x:.0f}%" if _finite(x) else "n/a"


def _environment() -> Any:
    try:
        import jinja2
    except ImportError:
        raise missing_extra("report needs Jinja2", "report") from None
    loader = jinja2.PackageLoader("llm_policy_gen.report", "templates")
    env = jinja2.Environment(loader=loader,
                             autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=num, count=count, usd=usd, signed=signed, percent=percent)
    script = loader.get_source(env, "report.js")[0]
    safe = jinja2.utils.markupsafe.Markup  # both are the package's own text, written as they are
    env.globals.update(script=safe(script), script_hash=safe(_sha256_source(script)),
                       heldout_key=file_key("best_heldout_mean"))  # the key summary.json names it by
    return env


def _sha256_source(script: str) -> str:
    """The content security policy's source for exactly this inline script (no 'unsafe-inline' needed)."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def run_cards(run: RunData, compact: bool = False) -> list[Card]:
    """The summary figures of a run, each saying what it measures (from summary.json, else the last iteration)."""
    s = run.facts
    last = run.iterations[-1] if run.iterations else None
    as_of = "" if run.finished else f" (as of iteration {last.iteration if last else 0}; the run did not finish)"
    held = s.get("best_heldout_mean", last.heldout if last else None)
    n_held = s.get("best_heldout_episodes") or run.settings.get("heldout_episodes")
    std = f", std {num(s.get('best_heldout_std'), 2)}" if _finite(s.get("best_heldout_std")) else ""
    best_it = s.get("best_iteration")
    test = s.get("best_test_mean", last.best_test if last else None)
    n_test = last.test_episodes if last else None
    threshold = s.get("reward_threshold", (run.config.get("env_spec") or {}).get("reward_threshold"))
    cards = [
        Card("held-out mean", num(held, 2), f"the kept table{f' (iteration {best_it})' if best_it else ''} on "
             f"{count(n_held)} held-out episodes{std}; reported only, never used to choose{as_of}", "held",
             file_key("best_heldout_mean")),
        Card("test mean of the kept table", num(test, 2), f"on the test seeds of the last iteration ("
             f"{count(n_test)} episodes); a candidate must beat it to be adopted{as_of}", "test", "best_test_mean"),
    ]
    solved = s.get("solved")
    if threshold is None:
        cards.append(Card("solved", "n/a", "this environment defines no reward threshold"))
    elif solved:
        cards.append(Card("solved", "yes", f"held-out mean >= {num(threshold, 1)} at iteration "
                          f"{s.get('iteration_solved')}, after {count(s.get('episodes_to_solve'))} episodes", "",
                          "solved"))
    else:
        cards.append(Card("solved", "no" if run.finished else "not yet",
                          f"held-out mean has not reached {num(threshold, 1)}", "", "solved"))
    episodes = s.get("episodes_total", last.episodes_total if last else None)
    steps = s.get("env_steps_total", last.steps_total if last else None)
    calls = s.get("llm_calls", sum(it.calls for it in run.iterations))
    tin = s.get("input_tokens", sum(it.input_tokens for it in run.iterations))
    tout = s.get("output_tokens", sum(it.output_tokens for it in run.iterations))
    cost = s.get("cost_usd", sum(it.cost_usd for it in run.iterations))
    cards += [
        Card("episodes", count(episodes), f"{count(steps)} environment steps: training, test and confirmation "
             "episodes (held-out ones not counted)", "", "episodes_total"),
        Card("model calls", count(calls), ("not an LLM: its calls are free" if run.is_llm is False else
                                           f"{count(s.get('cached_calls'))} from the cache, "
                                           f"{count(s.get('failed_calls'))} failed"), "", "llm_calls"),
        Card("tokens in / out", f"{count(tin)} / {count(tout)}",
             f"{count(s.get('cached_input_tokens'))} input tokens served from the provider's prompt cache"
             if s.get("cached_input_tokens") else "prompt and answer tokens, summed over every call"),
        Card("cost", usd(cost), "every call priced" if s.get("cost_complete", True)
             else "some calls had no price: the true cost is higher", "", "cost_usd"),
    ]
    if compact:
        return cards
    k = s.get("candidates", run.settings.get("candidates"))
    cards += [
        Card("iterations", count(s.get("iterations", last.iteration if last else 0)),
             f"stop: {s.get('stop_reason')}" if s.get("stop_reason") else "no summary.json: the run did not finish",
             "", "iterations"),
        Card("tables judged per iteration", count(k if k is not None else (1 if run.version == 1 else None)),
             f"{count(s.get('accepted_count', sum(it.accepted for it in run.iterations)))} adopted in all"),
        Card("wall time", f"{num(s.get('wall_s', sum(it.wall_s or 0 for it in run.iterations)), 1)} s",
             "the run's own time, resumes included"),
    ]
    return cards


def _generated() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _json_text(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False, default=str)


def _relative_link(target: Path, page: Path) -> str:
    """``target`` as a link from ``page``: a relative path, each part percent-escaped and starting with ``./``, so
    that no folder name (``javascript:alert(1)``) can make it a URL with a scheme."""
    rel = Path(os.path.relpath(Path(target).resolve(), Path(page).resolve().parent))
    return "./" + "/".join(quote(part, safe="") for part in rel.parts)


def render_run(run: RunData) -> str:
    """The run page (see ``templates/run.html.j2``)."""
    template = _environment().get_template("run.html.j2")
    store = TextStore()
    calls = build_calls(run.transcripts, store)
    packed = store.packed() if store.pieces else ""
    policy, policy_note = policy_image(run.path)
    s = run.summary or {}
    threshold = s.get("reward_threshold", (run.config.get("env_spec") or {}).get("reward_threshold"))
    settings = sorted((k, json.dumps(v, ensure_ascii=False)) for k, v in run.settings.items())
    raw = [(f"{name} (as written)", _json_text(obj)) for name, obj in (
        (SUMMARY, run.summary), ("environment spec", run.config.get("env_spec")),
        ("backend", run.config.get("backend")), (CONFIG, run.config or None)) if obj]
    method = isinstance(run.config.get("backend"), dict) and "method" in run.config["backend"]  # it names its model
    model = str(s.get("model") or "") if run.is_llm and not method else ""
    return str(template.render(
        kind="run", run=run, version=__version__, run_version=run.config.get("version", "?"), generated=_generated(),
        model=model, mode=s.get("mode", run.config.get("mode", run.settings.get("mode", "table"))),
        seed=s.get("seed", run.config.get("seed", "?")), stop_reason=s.get("stop_reason", ""),
        cards=run_cards(run), heldout_episodes=count(s.get("best_heldout_episodes")
                                                     or run.settings.get("heldout_episodes", 100)),
        curves=run_curves(run.iterations, threshold), usage=usage_curves(run.iterations), policy=policy,
        policy_note=policy_note, calls=calls, call_iterations={g.iteration for g in calls},
        n_calls=sum(len(g.calls) for g in calls), n_invalid=sum(g.invalid for g in calls),
        text_chars=store.chars, packed=packed, packed_kb=f"{len(packed) / 1024:,.0f}", settings=settings,
        raw_files=raw,
    ))


def render_compare(data: CompareData, out: Path, run_reports: dict[str, Path] | None = None) -> str:
    """The comparison page; ``run_reports`` maps a result row's run_dir to its own report file (linked, as is a
    run's ``report.html`` made earlier)."""
    from ..sweep.figures import plot_curves
    from ..sweep.interaction import TOLERANCE, budget_text, unequal_interaction
    from ..sweep.results import backend_stats
    from .data import load_run

    template = _environment().get_template("compare.html.j2")
    record = data.record
    threshold = record.reward_threshold
    curves = file_uri(data.path / "curves.png")
    if curves is None and data.curves:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            curves = file_uri(plot_curves(data.curves, Path(tmp) / "curves.png", f"{data.env_id}: kept table over "
                                          "seeds", data.backends, threshold,
                                          names={r.backend: r.name for r in data.rows}))
    runs = []
    for row in data.rows:
        d = data.run_dir(row)
        run = load_run(d) if d is not None else None
        report = (run_reports or {}).get(str(row.run_dir))
        if report is None and d is not None and (d / REPORT_NAME).is_file():
            report = d / REPORT_NAME  # made earlier (`report RUN_DIR` or --run-reports)
        link = _relative_link(report, Path(out)) if report is not None else None
        test = (run.summary or {}).get("best_test_mean") if run else None
        if test is None and run and run.iterations:
            test = run.iterations[-1].best_test
        runs.append({"row": row, "run": run, "cards": run_cards(run, compact=True) if run else [], "link": link,
                     "anchor": f"run-{slug(str(row.backend))}-s{row.seed}", "test_mean": test})
    return str(template.render(
        kind="compare", data=data, version=__version__, generated=_generated(), packed="",
        seeds_text=record.seeds_text or ",".join(str(x) for x in record.seeds) or "?",
        iterations=record.iterations, command=record.command, threshold=threshold,
        heldout_episodes=count(record.heldout_episodes),
        stats=backend_stats(data.rows, data.backends, data.random, threshold), curves=curves,
        seeds_fig=seed_curves(data, threshold),
        runs=runs, budget=budget_text(record.settings), tolerance=percent(TOLERANCE),
        unequal=unequal_interaction(data.rows, data.backends, record.settings),
    ))
