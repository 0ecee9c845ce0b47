"""The suite's one results store: ``records.jsonl``, one :class:`SuiteRecord` a line, each with a schema version.

A record is one finished run of one cell (task, method, seed) and everything a table or a figure needs from it:
the numbers of its ``summary.json`` in the reader's words, its held-out curve, the settings and the budget it was
given, the code version that made it and where it came from. A cell is named by :func:`cell_key`, a digest of what
decides its result (environment, method entry, seed, budget, settings), so a record is reused exactly when the suite
still asks for the same run, and a changed setting makes a new cell (the old record stays, as history).

Records are appended, never rewritten: a record made again (a cell run anew) is a new line, and the newest line of a
cell is the one read (:func:`latest`). Writers hold the file's lock (``records.jsonl.lock``), so parallel runs and
``bench`` invocations add lines without tearing each other's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..storage.runlog import append_jsonl, read_jsonl, to_jsonable

__all__ = ["SCHEMA_VERSION", "RECORDS", "SuiteRecord", "cell_key", "read_records", "append_records", "latest"]

SCHEMA_VERSION = 1
RECORDS = "records.jsonl"


def cell_key(env_id: str, entry: str, seed: int, budget: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """12 hex digits naming what decides a cell's result: the same arguments give the same key on every machine."""
    from ..schema.aliases import settings_in

    doc = {"env_id": env_id, "entry": entry, "seed": int(seed), "budget": dict(sorted(budget.items())),
           "settings": dict(sorted(settings_in(to_jsonable(dict(settings)), "a suite's settings").items()))}
    text = json.dumps(to_jsonable(doc), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class SuiteRecord:
    """One finished run of one cell of a suite."""

    suite: str
    task: str
    """The task's key in the suite (``cartpole``)."""
    env_id: str
    method: str
    """The method's label in the suite (``offline``, ``ppo-at-offline``)."""
    entry: str
    """The method entry the run was made with (``compare --methods`` grammar)."""
    seed: int
    cell: str
    """:func:`cell_key` of the run."""
    budget: dict[str, Any]
    """What the suite gave it: ``{"max_episodes": 100}``, ``{"max_steps": 34313}`` or ``{}`` (its own)."""
    settings: dict[str, Any]
    """The settings the suite gave the run on top of the spec's (the task's and the entry's options)."""
    result: dict[str, Any]
    """The run's figures in the reader's words: ``heldout_mean`` (the reported policy's held-out mean),
    ``episodes``, ``env_steps``, ``iterations``, ``wall_s``, ``cpu_s``, ``calls``, ``tokens_in``, ``tokens_out``,
    ``cost_usd``, ``stop_reason``, and where the run reports them ``final_heldout_mean``,
    ``selected_heldout_mean``, ``heldout_within`` (as of the last iteration within the budget) and ``model``."""
    curve: list[list[float | None]] = field(default_factory=list)
    """``[env_steps, episodes, heldout_mean]`` after each iteration."""
    code: str = ""
    """The code that made it: the package version and the git commit (``0.9.0+45a324f``)."""
    made: str = ""
    """When the record was made (ISO 8601, UTC)."""
    source: str = "run"
    """``run`` (a run of ``llm-policy-gen bench``) or how an older record came here (``imported: ...``)."""
    command: str = ""
    """The command that made it (secrets redacted)."""
    schema_version: int = SCHEMA_VERSION

    @property
    def heldout(self) -> float | None:
        v = self.result.get("heldout_mean")
        return None if v is None else float(v)

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(asdict(self))  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "") -> SuiteRecord:
        version = data.get("schema_version")
        if not isinstance(version, int) or version < 1:
            raise UserError(f"{where}: a suite record without a schema_version")
        if version > SCHEMA_VERSION:
            raise UserError(f"{where}: a suite record of schema_version {version}, newer than this package reads "
                            f"({SCHEMA_VERSION}); upgrade llm-policy-gen")
        names = {f.name for f in fields(cls)}
        missing = [n for n in ("suite", "task", "env_id", "method", "entry", "seed", "cell", "budget", "settings",
                               "result") if n not in data]
        if missing:
            raise UserError(f"{where}: a suite record without {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})


def read_records(path: Path) -> list[SuiteRecord]:
    """Every record of a store (``records.jsonl``, or a folder holding one); none when there is no file."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS
    if not path.is_file():
        return []
    return [SuiteRecord.from_json(line, f"{path} line {i}")
            for i, line in enumerate(read_jsonl(path, ints=("seed", "schema_version")), 1)]


def append_records(path: Path, records: Iterable[SuiteRecord]) -> None:
    """Add ``records`` to the store at ``path`` (a folder or its ``records.jsonl``), one line each, under its
    lock."""
    from filelock import FileLock

    path = Path(path)
    if path.is_dir() or not path.suffix:
        path = path / RECORDS
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        for r in records:
            append_jsonl(path, r.to_json())


def latest(records: Sequence[SuiteRecord]) -> dict[str, SuiteRecord]:
    """The newest record of each cell (the last line of the cell in file order)."""
    out: dict[str, SuiteRecord] = {}
    for r in records:
        out[r.cell] = r
    return out
