"""``bench SUITE --publish-from OUT``: a finished bench folder's records into the suite's committed store, without
running anything.

A long measurement runs into its own folder (``--out``), often from a worktree at a fixed commit; once it is done,
its records are published here: every record of ``OUT/records.jsonl`` that belongs to the suite and to the selection
(``--tasks``, ``--methods`` as suite labels, ``--seeds``) and that the committed store does not hold yet (the same
cell made at the same time) is appended under the store's lock, then the uniform random policy's held-out mean is
measured for every (task, seed) published that ``references.json`` lacks (none for a settings search, whose tables
normalise nothing). Nothing else changes; the pages are rendered from the store by ``python tools/render_pages.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .cells import Selection
from .definition import Suite
from .references import add_random_policy
from .store import RECORDS, SuiteRecord, append_records, read_records

__all__ = ["Published", "publish_from", "add_references"]


@dataclass(frozen=True)
class Published:
    records: tuple[SuiteRecord, ...]
    """The records appended to the committed store."""
    held: int
    """Records of the selection the store held already."""
    references: int
    """Random-policy means measured and added to ``references.json``."""


def _wanted(record: SuiteRecord, suite: Suite, selection: Selection) -> bool:
    tasks = {t.key for t in selection.tasks}
    labels = {m.label for m in selection.methods}
    seeds = selection.seeds
    return (record.suite == suite.name and record.task in tasks and record.method in labels
            and (seeds is None or record.seed in seeds))


def publish_from(folder: Path, store: Path, suite: Suite, selection: Selection) -> Published:
    """Append the records of bench folder ``folder`` that ``selection`` picks and ``store`` (a ``records.jsonl``)
    lacks; then the random policy's references of the (task, seed) pairs published. A folder without records is a
    UserError, and nothing is written."""
    source = Path(folder) / RECORDS
    if not source.is_file():
        raise UserError(f"bad --publish-from {str(folder)!r}: no {RECORDS} there (give the --out folder of a "
                        f"bench {suite.name} run)")
    picked = [r for r in read_records(source) if _wanted(r, suite, selection)]
    have = {(r.cell, r.made) for r in read_records(store)}
    new = tuple(r for r in picked if (r.cell, r.made) not in have)
    append_records(store, new)
    return Published(new, len(picked) - len(new), add_references(store.parent, suite, [(r.task, r.seed) for r in new]))


def add_references(folder: Path, suite: Suite, pairs: Sequence[tuple[str, int]]) -> int:
    """The uniform random policy's held-out mean for each (task, seed) of ``pairs`` that the store ``folder``'s
    ``references.json`` lacks (:func:`~.references.add_random_policy`); none for a settings search (a suite with a
    ``[choice]``), whose tables normalise nothing. Returns how many were measured."""
    if suite.choice is not None or not pairs:
        return 0
    return add_random_policy(folder, {t.key: t.env_id for t in suite.tasks}, pairs)
