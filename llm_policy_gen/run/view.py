"""What one reader of a run directory gives: :class:`RunView` (``RunDir.read()``) and :class:`RunState`
(``RunDir.state()``). This module holds the records and their rules; :mod:`.files` opens the files.

Every reader of a finished or unfinished run (the report, the plots, the sweep, the loggers, the bench) asks for a
:class:`RunView`: ``config.json`` in this version's layout (:func:`~.schema.config_of`), ``summary.json`` and the
``events.jsonl`` lines in the code's words (``test_*`` for the test seeds, ``heldout_*`` for the held-out seeds;
older files are read through :mod:`llm_policy_gen.schema.aliases`, whatever their layout), and the run's facts
(environment, backend, mode) with one precedence: the summary, then the configuration record, then its settings.

:class:`RunState` is the one rule of "finished": a run is a result only when its summary records a stop it chose
(:attr:`~.stop.StopReason.finished`); an interrupted or failed run is resumed, a folder without a configuration is
stale, and neither is ever read as a result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..schema.aliases import LAYOUT_BEFORE_CANDIDATES, events_in, summary_in
from .stop import StopKind, StopReason

__all__ = ["RunState", "RunView", "ended_for_good", "state_from", "view_of"]

Axis = Literal["iterations", "episodes", "steps"]
_AXIS_KEY: dict[str, str] = {"iterations": "iteration", "episodes": "episodes_total", "steps": "env_steps_total"}


_LEARNERS_BEFORE = frozenset({"q-learning", "lm-policy"})
"""Modes whose kept table was selected by the keeper from a learner's read-outs before summaries recorded the final
policy (their final held-out mean is unknown)."""


class RunState(enum.Enum):
    """What a run directory holds, from its files alone."""

    NEW = "new"
    """Nothing there."""
    STALE = "stale"
    """A folder without a readable ``config.json`` (a run that never started, or not a run): never a result."""
    STARTED = "started"
    """A configuration and no summary: running, or killed; resumable."""
    INTERRUPTED = "interrupted"
    """Stopped by Ctrl-C, SIGTERM or SIGHUP (its summary says so); resumable."""
    FAILED = "failed"
    """Ended by a failure it could not go on from (an error, refused credentials, an unreachable backend)."""
    FINISHED = "finished"
    """Ended for good (all iterations, a budget, no new best): the one state whose figures are a result."""

    @property
    def resumable(self) -> bool:
        return self in (RunState.STARTED, RunState.INTERRUPTED, RunState.FAILED)


def ended_for_good(summary: Mapping[str, Any] | None) -> bool:
    """A summary that records a stop the run chose (all iterations, a budget, no new best): a result."""
    reason = None if summary is None else StopReason.parse(summary.get("stop_reason"))
    return reason is not None and reason.finished


def state_from(record: object, summary: dict[str, Any] | None) -> RunState:
    """The state of a run whose ``config.json`` holds ``record`` (None: none, or unreadable) and whose
    ``summary.json`` holds ``summary`` (None: none)."""
    if not (isinstance(record, dict) and isinstance(record.get("config"), dict)):
        return RunState.STALE
    reason = None if summary is None else StopReason.parse(summary.get("stop_reason"))
    if reason is None:  # no summary, or one that does not say how the run ended
        return RunState.STARTED
    if ended_for_good(summary):
        return RunState.FINISHED
    return RunState.INTERRUPTED if reason.kind is StopKind.INTERRUPTED else RunState.FAILED


@dataclass(frozen=True)
class RunView:
    """A run directory read whole, in the code's words."""

    path: Path
    state: RunState
    record: dict[str, Any]
    """``config.json`` in this version's layout."""
    summary: dict[str, Any]
    """``summary.json`` in the code's names (empty while the run has not ended)."""
    events: list[dict[str, Any]]
    """The ``events.jsonl`` lines in the code's names, by iteration."""
    layout: int
    """The layout of ``events.jsonl``: :data:`~llm_policy_gen.schema.aliases.LAYOUT_BEFORE_CANDIDATES` or later."""
    file_summary: dict[str, Any] | None = field(default=None, repr=False)
    """``summary.json`` as the file has it (its keys), for the writers of tables that keep the file's keys."""

    @property
    def settings(self) -> dict[str, Any]:
        """The resolved settings (``config.json``'s ``config``)."""
        return dict(self.record.get("config") or {})

    def fact(self, key: str, default: Any = None) -> Any:
        """A run-level fact: the summary's, else the configuration record's, else its settings' (the first that is
        neither missing nor empty)."""
        for source in (self.summary, self.record, self.settings):
            if source.get(key) not in (None, ""):
                return source[key]
        return default

    @property
    def env_id(self) -> str:
        spec = self.record.get("env_spec") or {}
        return str(self.fact("env_id") or spec.get("env_id") or "")

    @property
    def mode(self) -> str:
        return str(self.fact("mode") or "table")

    @property
    def backend(self) -> str:
        """The backend's name (``replay``, ``offline``, ``llamacpp``): the summary's, else the configuration's
        description of it, else the spec as given."""
        name = self.summary.get("backend")
        if not name:
            desc = self.record.get("backend")
            name = (desc.get("name") or desc.get("provider")) if isinstance(desc, dict) else None
        return str(name or self.settings.get("backend") or "")

    @property
    def backend_spec(self) -> str:
        """The backend as the run was given it (``replay:PATH``, ``llamacpp:PATH.gguf``), else :attr:`backend`."""
        return str(self.settings.get("backend") or self.backend)

    @property
    def threshold(self) -> float | None:
        value = (self.record.get("env_spec") or {}).get("reward_threshold", self.summary.get("reward_threshold"))
        return None if value is None else float(value)

    @property
    def before_candidates(self) -> bool:
        """Written before K candidates (the held-out key of the files then held the kept table's test mean)."""
        return self.layout == LAYOUT_BEFORE_CANDIDATES

    @property
    def final_heldout_mean(self) -> float | None:
        """The final policy's held-out mean (:mod:`llm_policy_gen.modes.selection`). A summary written before it was
        recorded: the reported policy's, where that was the final one (a table search's kept table, a peer's last
        network), else unknown (a learner's kept table was selected)."""
        if "final_heldout_mean" in self.summary:
            return self.summary["final_heldout_mean"]
        return None if self.mode in _LEARNERS_BEFORE else self.summary.get("best_heldout_mean")

    @property
    def selected_heldout_mean(self) -> float | None:
        """The selected policy's held-out mean, for a run that selected with counted episodes (None: it did not).
        A summary written before it was recorded: the kept table's (every mode but the peer selected with it)."""
        if "selected_heldout_mean" in self.summary:
            return self.summary["selected_heldout_mean"]
        return None if self.mode == "peer" else self.summary.get("best_heldout_mean")

    def curve(self, y: str = "heldout_mean", x: Axis = "episodes") -> tuple[list[float], list[float | None]]:
        """``y`` of each iteration against ``x`` (iterations, counted episodes or counted steps): the iterations
        that carry ``x``, with None where ``y`` was not measured."""
        key = _AXIS_KEY[x]
        rows = [e for e in self.events if e.get(key) is not None]
        return [float(e[key]) for e in rows], [None if e.get(y) is None else float(e[y]) for e in rows]


def view_of(path: Path, record: dict[str, Any] | None, file_summary: dict[str, Any] | None,
            lines: list[dict[str, Any]]) -> RunView:
    """The view of the run at ``path`` from its files' records as read (the file's keys, any layout)."""
    events, layout = events_in(sorted(lines, key=lambda e: int(e.get("iteration", 0))))
    state = state_from(record, file_summary) if path.exists() else RunState.NEW
    return RunView(path, state, record or {}, summary_in(file_summary or {}), events, layout, file_summary)
