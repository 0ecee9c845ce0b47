"""The report: one self-contained HTML page for a run directory or a comparison directory.

::

    llm-policy-gen report RUN_DIR|COMPARE_DIR [--out FILE.html] [--run-reports]

The page works offline: figures are PNG data URIs, the style and the script are inline, and its content security
policy forbids any request. For a run it shows the summary figures (saying which mean is which), the curves against
iterations and against episodes, the policy figure, each iteration's candidates with their test means and which one
was adopted (with the paired confirmation), every model call (prompt, answer, validation errors, tokens, cost,
latency, cache hits) and the configuration. For a comparison: the results table with its confidence intervals, the
curves, and a section per run (``--run-reports`` also writes each run's own page and links it).

Pages are made from Jinja2 templates (extra ``report``). Run directories from before K candidates per iteration
still work (:mod:`.data`). The default ``--out`` is ``report.html`` inside the directory.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..run.files import RunDir
from ..schema.argtypes import check_out_file
from ..storage.runlog import write_bytes_atomic
from .data import REPORT_NAME, is_compare_dir, is_run_dir, load_compare, load_run

__all__ = ["write_report", "REPORT_NAME"]


def _check_out(out: Path) -> Path:
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"bad --out {str(out)!r}: the report is one HTML file; give a name ending in .html")
    if out.is_dir():
        raise UserError(f"bad --out {str(out)!r}: it is a directory; give a file name ending in .html")
    return check_out_file(out, "--out")  # before the page is made: a missing folder is known at once


def _write(out: Path, html: str) -> Path:
    try:
        write_bytes_atomic(out, html.encode("utf-8"))
    except OSError as exc:
        raise UserError(f"cannot write --out {out}: {exc.strerror or exc}") from None
    return out


def write_report(target: Path, out: Path | None = None, run_reports: bool = False) -> list[Path]:
    """Write the page for ``target`` (a run or comparison directory); returns the files written, the page last."""
    from .render import render_compare, render_run

    target = Path(target)
    if not target.is_dir():
        raise UserError(f"{target} is not a directory; give a run directory (from `train`) or a comparison "
                        "directory (from `compare`)")
    out = _check_out(Path(out) if out is not None else target / REPORT_NAME)
    if is_compare_dir(target):
        data = load_compare(target)
        written: list[Path] = []
        links: dict[str, Path] = {}
        if run_reports:
            for row in data.rows:
                d = data.run_dir(row)
                if d is not None:
                    page = _write(d / REPORT_NAME, render_run(load_run(d)))
                    links[str(row.run_dir)] = page.resolve()
                    written.append(page)
        return [*written, _write(out, render_compare(data, out, links))]
    if is_run_dir(target):
        RunDir(target).check_no_links()  # the page neither reads nor writes through a link
        return [_write(out, render_run(load_run(target)))]
    raise UserError(f"{target} is neither a run directory (events.jsonl, summary.json) nor a comparison directory "
                    "(results.csv); give the folder `train` or `compare` printed")



