"""Build the paper's tables and figures from a comparison directory, then the PDF when ``pdflatex`` exists.

::

    python tools/paper.py --compare-dir DIR --out paper      # what `make paper` runs

A script beside the package, not part of it: it reads the comparison through :mod:`llm_policy_gen.sweep.results`
(and draws with :mod:`llm_policy_gen.sweep.figures` and :mod:`llm_policy_gen.plotting`), like any other reader.

Writes into ``OUT/generated/``:

* ``numbers.tex`` -- ``\\newcommand`` macros for every number the text quotes (environment, bins, seeds,
  iterations, episode counts, statistics settings), read from ``DIR/compare.json``, ``DIR/results.csv`` and the
  runs' ``config.json``;
* ``results_table.tex`` -- the per-backend table of ``results.md`` (the same statistics,
  :func:`llm_policy_gen.sweep.results.backend_stats`);
* ``ranking.tex`` -- one generated paragraph: backends ordered by final score, which intervals overlap;
* ``llm_status.tex`` -- which LLM backends are reported and which were left out (see below);
* ``curves.png`` (median and interquartile band per backend), ``policy.png`` (the best run's table) and
  ``policy_caption.tex`` (its caption, as the macro ``\\PolicyCaption``);
* ``failed.tex`` -- the runs that failed, if any.

**Every number comes from a run; LLM rows only from real calls.** A run of a backend whose summary says
``is_llm: true`` is reported only when its ``transcripts.jsonl`` holds at least one call that was not answered from
the cache and that used tokens; other LLM runs are left out and listed in ``llm_status.tex``. Backends that are not
language models (offline optimiser, q-learning, random) are always reported, and marked as such.

An ``OUT`` without a ``main.tex`` (any folder but ``paper/``) gets a copy of the shipped ``paper/main.tex`` first; an
``OUT/main.tex`` already there (your own text) is never overwritten. Then, if ``pdflatex`` is on the PATH,
``OUT/main.tex`` is compiled twice in ``OUT/build/`` and the PDF copied to ``OUT/main.pdf``; otherwise the command
stops after the generated files with a message saying so (exit 0).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_policy_gen.errors import UserError
from llm_policy_gen.modes.learner import LearnerOptions
from llm_policy_gen.plotting.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.schema.aliases import settings_in
from llm_policy_gen.storage.runlog import write_bytes_atomic
from llm_policy_gen.sweep.figures import plot_curves
from llm_policy_gen.sweep.interaction import unequal_interaction
from llm_policy_gen.sweep.methods import parse_method
from llm_policy_gen.sweep.results import ResultRow, SweepRecord, backend_stats, load_curves, read_results

__all__ = ["has_real_calls", "select_rows", "latex_escape", "generate", "build_pdf", "main"]


def latex_escape(text: Any) -> str:
    """``text`` with LaTeX's special characters escaped."""
    out = str(text)
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                 ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\^{}")):
        out = out.replace(a, b) if a != "\\" else out.replace(a, "\x00")
    return out.replace("\x00", r"\textbackslash{}").replace("--", "-{}-")  # no en dash from option names


def has_real_calls(run_dir: Path) -> bool:
    """True when the run's transcripts hold a call that was not a cache hit and that used tokens."""
    for rec in RunDir(Path(run_dir)).load_transcripts():
        tokens = int(rec.get("input_tokens") or 0) + int(rec.get("output_tokens") or 0)
        if not rec.get("cached", False) and tokens > 0 and rec.get("response_text"):
            return True
    return False


def inside_rows(compare_dir: Path, rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The rows whose ``run_dir`` (if any) is a run directory inside the comparison folder, as the report reads them:
    a row naming an absolute path, ``..``, a link or a folder with links in it is left out, so the paper never reads
    a file from elsewhere."""
    from llm_policy_gen.report.data import CompareData

    folder = CompareData(Path(compare_dir), SweepRecord(), list(rows), [])
    return [r for r in rows if not r.ok or not r.run_dir or folder.run_dir(r) is not None]


def select_rows(compare_dir: Path, rows: Sequence[ResultRow]) -> tuple[list[ResultRow], list[str]]:
    """The rows the paper may report, and a note per LLM run left out."""
    kept, dropped = [], []
    for r in rows:
        if r.ok and r.is_llm:
            if not r.run_dir or not has_real_calls(Path(compare_dir) / r.run_dir):
                dropped.append(f"{r.name} seed {r.seed}")
                continue
        kept.append(r)
    return kept, dropped


def _macro(name: str, value: Any) -> str:
    return f"\\newcommand{{\\{name}}}{{{latex_escape(value)}}}"


def _fmt(x: float | None, digits: int = 1) -> str:
    return "--" if x is None or not np.isfinite(x) else f"{x:,.{digits}f}".replace(",", "{,}")


def _run_config(compare_dir: Path, row: ResultRow) -> dict[str, Any] | None:
    """The configuration record of a finished row's run (through the run directory's reader), or None."""
    if not (row.ok and row.run_dir):
        return None
    return RunDir(Path(compare_dir) / row.run_dir).load_config()


def _first_config(compare_dir: Path, rows: Sequence[ResultRow]) -> dict[str, Any]:
    for r in rows:
        record = _run_config(compare_dir, r)
        if record is not None:
            return record
    raise UserError(f"{compare_dir}: no finished run with its configuration; run `llm-policy-gen compare` first")


def _backend_config(compare_dir: Path, rows: Sequence[ResultRow], backend: str) -> dict[str, Any]:
    for r in rows:
        record = _run_config(compare_dir, r) if r.backend == backend else None
        if record is not None:
            return dict(record.get("backend") or {})
    return {}


def _learner_alpha(settings: dict[str, Any]) -> float:
    """The reward and advisor modes' step size: ``q_alpha``, or their own when it is None (the default)."""
    return LearnerOptions.model_validate({"q_alpha": settings.get("q_alpha")}).q_alpha


def numbers_tex(record: SweepRecord, cfg: dict[str, Any], rows: Sequence[ResultRow], kept: Sequence[ResultRow],
                qcfg: dict[str, Any]) -> str:
    from llm_policy_gen.envs.spec import EnvSpec

    c = settings_in(cfg["config"], "the run's configuration")  # today's names, whichever it wrote
    spec = EnvSpec.from_dict(cfg["env_spec"])
    dims = spec.dims
    bins = r" $\times$ ".join(str(d.bins) for d in dims) if dims else str(spec.n_states)
    thr = spec.reward_threshold
    macros = {
        "EnvId": record.env_id,
        "SeedsText": record.seeds_text,
        "NSeeds": len(record.seeds),
        "NBackends": len(record.backends),
        "NRuns": len(rows),
        "NRunsOk": sum(r.ok for r in rows),
        "NRunsReported": len(kept),
        "Iterations": c["iterations"],
        "TrainEpisodes": c["train_episodes"],
        "ExploreEpsilon": c["explore_epsilon"],
        "EvalStart": c["test_start"],
        "EvalMax": c["test_max"],
        "EvalRise": "one more every iteration" if c["test_rise_every"] == 1
        else f"one more every {c['test_rise_every']} iterations",
        "HeldoutEpisodes": c["heldout_episodes"],
        "BestK": c["best_k"],
        "WorstK": c["worst_k"],
        "RepairAttempts": c["repair_attempts"],
        "Bins": bins,
        "NStates": spec.n_states,
        "NActions": spec.n_actions,
        "DimNames": ", ".join(d.name for d in dims) if dims else "discrete cells",
        "RewardThreshold": "none" if thr is None else f"{thr:g}",
        "BootResamples": f"{DEFAULT_RESAMPLES:,}".replace(",", "{,}"),
        "BootSeed": DEFAULT_SEED,
        "BootConfidence": f"{100 * DEFAULT_CONFIDENCE:g}",
        "PackageVersion": cfg.get("version", ""),
        "CompareCommand": record.command,
        "QAlpha": qcfg.get("alpha", "--"),
        "QGamma": qcfg.get("gamma", "--"),
        "Modes": ", ".join(dict.fromkeys(row_mode(rows, b) for b in record.backends)),
        "LearnerAlpha": _learner_alpha(c),
        "LearnerGamma": c.get("q_gamma", "--"),
        "PotentialBound": c.get("reward_potential_bound", "--"),
        "AdviceProb": c.get("advisor_prob", "--"),
        "AdviceDecay": c.get("advisor_decay", "--"),
    }
    lines = ["% Generated by python tools/paper.py from the comparison directory; do not edit."]
    for k, v in macros.items():
        lines.append(_macro(k, v) if k not in ("BootResamples", "Bins") else f"\\newcommand{{\\{k}}}{{{v}}}")
    return "\n".join(lines) + "\n"


def row_mode(rows: Sequence[ResultRow], backend: str) -> str:
    """The mode of a method entry's runs (``BACKEND@MODE`` names it; else the rows' ``mode`` column, else table)."""
    try:
        named = parse_method(backend).mode
    except UserError:  # an entry this version does not read: its rows say
        named = None
    if named:
        return named
    return next((str(r.mode) for r in rows if r.backend == backend and r.mode), "table")


def results_table_tex(kept: Sequence[ResultRow], backends: Sequence[str]) -> str:
    stats = [s for s in backend_stats(kept, backends) if s.runs]
    lines = [
        "% Generated by python tools/paper.py; do not edit.",
        r"\setlength{\tabcolsep}{4pt}",
        r"\begin{tabular}{llccrrrrrrr}",
        r"\toprule",
        r"method & mode & LLM & runs & episodes/run & steps/run & IQM held-out return [95\% CI] & "
        r"median ep.\ to solve & solve rate & calls/run & wall s/run \\",
        r"\midrule",
    ]
    for s in stats:
        iqm = s.returns
        score = "--" if iqm.n == 0 else f"{_fmt(iqm.estimate)} [{_fmt(iqm.low)}, {_fmt(iqm.high)}]"
        med = "not reached" if s.median_episodes_to_solve is None else _fmt(s.median_episodes_to_solve, 0)
        rate = "--" if not np.isfinite(s.solve_rate) else f"{100 * s.solve_rate:.0f}\\%"
        lines.append(
            f"{latex_escape(s.name.removesuffix('@' + row_mode(kept, s.backend)))} & "
            f"{latex_escape(row_mode(kept, s.backend))} & "
            f"{'yes' if s.is_llm else 'no'} & {s.ok}/{s.runs} & {_fmt(s.episodes, 0)} & {_fmt(s.steps, 0)} & "
            f"{score} & {med} & "
            f"{rate} & {_fmt(s.calls)} & {_fmt(s.wall_s)} \\\\"
        )
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def ranking_tex(kept: Sequence[ResultRow], backends: Sequence[str], settings: dict[str, Any] | None = None) -> str:
    """The ranking paragraph; it starts with a warning when the backends ran at unequal interaction (``settings``:
    the sweep's given settings, whose budget names the measure compared)."""
    stats = [s for s in backend_stats(kept, backends) if s.returns.n]
    if not stats:
        return "No run finished, so there is nothing to rank.\n"
    unequal = unequal_interaction(kept, backends, settings or {})
    warning = f"\\textbf{{Warning}}: {latex_escape(unequal)}. " if unequal else ""
    stats.sort(key=lambda s: -s.returns.estimate)
    parts = [f"{latex_escape(s.name)} ({_fmt(s.returns.estimate)})" for s in stats]
    text = warning + "Ordered by the interquartile mean of the final held-out return: " + ", ".join(parts) + "."
    pairs = []
    for a, b in zip(stats, stats[1:], strict=False):
        overlap = a.returns.low <= b.returns.high
        pairs.append(f"the intervals of {latex_escape(a.name)} and {latex_escape(b.name)} "
                     f"{'overlap' if overlap else 'do not overlap'}")
    if pairs:
        text += " Between neighbours in this order, " + "; ".join(pairs) + "."
    solved = [s for s in stats if s.solve_rate > 0]
    if solved:
        text += " Runs reached the threshold for " + ", ".join(
            f"{latex_escape(s.name)} ({100 * s.solve_rate:.0f}\\% of seeds)" for s in solved) + "."
    else:
        text += " No run of any backend reached the reward threshold within its budget."
    return text + "\n"


def llm_status_tex(kept: Sequence[ResultRow], dropped: Sequence[str]) -> str:
    llm = sorted({r.name for r in kept if r.is_llm})
    if llm:
        text = ("Rows for language-model backends (" + ", ".join(latex_escape(b) for b in llm) + ") come from runs "
                "whose transcripts hold real, non-cached calls.")
    else:
        text = ("No language-model backend is reported: this comparison holds no run in which a language model "
                "answered a real (non-cached) call -- no provider could be reached where it was produced. Every "
                "row of the table is a baseline that is not a language model.")
    if dropped:
        text += (" Left out because their transcripts show no real call: " + ", ".join(latex_escape(d) for d in
                                                                                      dropped) + ".")
    return text + "\n"


def generate(compare_dir: Path, out: Path) -> list[Path]:
    """Write ``out/generated/*`` from ``compare_dir``; return the files written."""
    compare_dir = Path(compare_dir)
    meta_path = compare_dir / "compare.json"
    if not meta_path.is_file():
        raise UserError(f"{compare_dir} is not a comparison directory (no compare.json); run `llm-policy-gen "
                        f"compare --env ID --backends ... --out {compare_dir}` first")
    record = SweepRecord.from_json(json.loads(meta_path.read_text(encoding="utf-8")))
    rows = inside_rows(compare_dir, read_results(compare_dir / "results.csv"))
    kept, dropped = select_rows(compare_dir, rows)
    backends = [b for b in record.backends if any(r.backend == b for r in kept)]
    gen = Path(out) / "generated"
    gen.mkdir(parents=True, exist_ok=True)
    cfg = _first_config(compare_dir, kept)
    qcfg = _backend_config(compare_dir, kept, "q-learning")
    written = []

    def put(name: str, text: str) -> None:
        write_bytes_atomic(gen / name, text.encode("utf-8"))
        written.append(gen / name)

    put("numbers.tex", numbers_tex(record, cfg, rows, kept, qcfg))
    put("results_table.tex", results_table_tex(kept, backends))
    put("ranking.tex", ranking_tex(kept, backends, record.settings))
    put("llm_status.tex", llm_status_tex(kept, dropped))
    failed = [r for r in rows if not r.ok]
    put("failed.tex", ("Failed runs (not in the table): " + "; ".join(
        f"{latex_escape(r.name)} seed {r.seed}: {latex_escape(r.error)}" for r in failed) + ".\n")
        if failed else "No run failed.\n")
    keys = {(r.backend, r.seed) for r in kept if r.ok}
    curves = [c for c in load_curves(compare_dir) if (c.backend, c.seed) in keys]
    written.append(plot_curves(curves, gen / "curves.png", f"{record.env_id}: kept table over seeds", backends,
                               record.reward_threshold, names={r.backend: r.name for r in kept}))
    written.append(_policy_figure(compare_dir, kept, gen / "policy.png", put))
    return written


def _policy_figure(compare_dir: Path, kept: Sequence[ResultRow], target: Path, put: Any) -> Path:
    from llm_policy_gen.plotting.table_figure import plot_policy
    from llm_policy_gen.run.files import load_run_policy

    ok = [r for r in kept if r.ok and r.best_heldout_mean is not None]
    best = max(ok, key=lambda r: (r.best_heldout_mean or 0.0, -int(r.seed)))
    policy, spec = load_run_policy(Path(compare_dir) / str(best.run_dir))
    put("policy_caption.tex", "\\newcommand{\\PolicyCaption}{The kept table of the best run: "
        f"{latex_escape(best.backend)}, seed {best.seed}, held-out mean {_fmt(best.best_heldout_mean, 2)}.}}\n")
    return plot_policy(policy, target, spec, title=f"{policy.env_id}: {best.backend} seed {best.seed}")


PAPER_SOURCE = Path(__file__).resolve().parent.parent / "paper" / "main.tex"
"""The paper's text, which reads everything it quotes from ``generated/``."""


def ensure_source(out: Path) -> Path | None:
    """Copy :data:`PAPER_SOURCE` into ``out`` when ``out`` has no ``main.tex``; the copy, or None when none was
    needed (``out`` is ``paper/`` itself, or holds its own text)."""
    target = Path(out) / "main.tex"
    if target.exists():
        return None
    write_bytes_atomic(target, PAPER_SOURCE.read_bytes())
    return target


def build_pdf(out: Path, log: Any = print) -> Path | None:
    """Compile ``out/main.tex`` twice with pdflatex in ``out/build``; None when pdflatex is not installed."""
    exe = shutil.which("pdflatex")
    if exe is None:
        return None
    out = Path(out)
    if not (out / "main.tex").is_file():
        raise UserError(f"{out / 'main.tex'} does not exist")
    build = out / "build"
    build.mkdir(exist_ok=True)
    for _ in range(2):
        proc = subprocess.run(
            [exe, "-interaction=nonstopmode", "-halt-on-error", "-output-directory", "build", "main.tex"],
            cwd=out, capture_output=True, text=True, timeout=300,
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-25:])
            raise RuntimeError(f"pdflatex failed (see {build / 'main.log'}):\n{tail}")
    pdf = out / "main.pdf"
    shutil.copyfile(build / "main.pdf", pdf)
    log(f"built {pdf}")
    return pdf


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/paper.py",
                                     description="Generate the paper's tables and figures, then build the PDF.")
    parser.add_argument("--compare-dir", required=True, help="a directory written by `llm-policy-gen compare`")
    parser.add_argument("--out", default="paper", help="the paper directory holding main.tex (default paper)")
    parser.add_argument("--no-pdf", action="store_true", help="stop after the generated files")
    args = parser.parse_args(argv)
    try:
        written = generate(Path(args.compare_dir), Path(args.out))
        copied = ensure_source(Path(args.out))
        written += [copied] if copied is not None else []
        for w in written:
            print(f"wrote {w}")
        if args.no_pdf:
            return 0
        if build_pdf(Path(args.out)) is None:
            print(f"pdflatex is not installed: stopped after the generated tables and figures in "
                  f"{Path(args.out) / 'generated'}. Install TeX Live (e.g. apt-get install texlive-latex-base "
                  "texlive-latex-recommended) and run `make paper` again to build the PDF.", file=sys.stderr)
    except UserError as exc:
        print(f"paper: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"paper: failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
