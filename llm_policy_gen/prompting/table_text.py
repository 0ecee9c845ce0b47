"""The current table as prompt text, under a size budget: its rows (per bin tuple of the first dimensions, per grid
row, or run-length ranges), else regions of equal entries when the rows do not fit; for an answer format that does not
show the table (``rules``), what the format writes instead (the table itself is never shown)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..discretize import BoxDiscretizer, DiscreteDiscretizer, ObservationDiscretizer
from ..formats.base import AnswerFormat, Target
from ..formats.edits import table_as_edits

__all__ = ["table_text", "table_rows", "entry_text"]


def table_text(table: np.ndarray, observation: ObservationDiscretizer, target: Target, budget: int,
               size: Callable[[str], int], source: Mapping[str, Any] | None = None,
               fmt: AnswerFormat[Any] | None = None) -> str:
    """``table`` as rows when they fit ``budget`` (measured by ``size``), else as regions of equal entries; with an
    answer format ``fmt`` that does not show the table, what its :meth:`~.formats.base.AnswerFormat.current_text`
    writes (``source``: what the table was compiled from)."""
    if fmt is not None and not fmt.shows_table:
        return fmt.current_text(table, observation, target, budget, size, source)
    text = table_rows(table, observation, target)
    if size(text) <= budget:
        return text
    what = target.field
    lines = [f"The table as regions of equal {what} (bins of each listed dim, inclusive; unlisted dims: any):"]
    regions = table_as_edits(np.asarray(table), observation)
    used = size(lines[0])
    for k, e in enumerate(regions):
        cond = ", ".join(f"dim {c['dim']} {c['min_bin']}-{c['max_bin']}" for c in e["conditions"]) or "all states"
        line = f"{cond}: {what} {entry_text(e['entry'])}"
        if used + size(line) + 1 > budget:
            lines.append(f"({len(regions) - k} more regions not shown; the table has {len(table)} states)")
            break
        lines.append(line)
        used += size(line) + 1
    return "\n".join(lines)


def table_rows(table: np.ndarray, observation: ObservationDiscretizer, target: Target) -> str:
    """Every entry of ``table``: one line per bin tuple of the first dimensions (a ``Box`` observation), per grid
    row (a grid world), else run-length ranges of states."""
    t = np.asarray(table)
    obs = observation
    if isinstance(obs, BoxDiscretizer) and len(obs.bins) > 1:
        last = int(obs.bins[-1])
        lines = [f"One line per bin tuple of the first dimensions; the {last} values are the "
                 f"{target.field}s for {obs.dims[-1].name} bins 0..{last - 1}."]
        for start in range(0, len(t), last):
            prefix = obs.decode(start)[:-1]
            vals = " ".join(entry_text(a) for a in t[start : start + last])
            lines.append(f"s{start}-{start + last - 1} {prefix}: {vals}")
        return "\n".join(lines)
    if isinstance(obs, DiscreteDiscretizer) and obs.grid is not None:
        rows, cols = obs.grid
        lines = [f"Grid rows top to bottom; values are the {target.field}s of the {cols} cells of the row."]
        for r in range(rows):
            lines.append(f"row {r} (s{r * cols}-{r * cols + cols - 1}): " + " ".join(
                entry_text(a) for a in t[r * cols : (r + 1) * cols]))
        return "\n".join(lines)
    # Run-length ranges for anything else.
    out, s = [], 0
    while s < len(t):
        e = s
        while e + 1 < len(t) and t[e + 1] == t[s]:
            e += 1
        out.append(f"{s}-{e}:{entry_text(t[s])}" if e > s else f"{s}:{entry_text(t[s])}")
        s = e + 1
    return f"states:{target.field} " + " ".join(out)


def entry_text(x: Any) -> str:
    """A table entry as prompt text: an action index, or a value with 3 significant digits."""
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.3g}"
