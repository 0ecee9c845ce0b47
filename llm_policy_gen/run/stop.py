"""Why a run stopped: one type, written into ``summary.json`` by the run and read back by ``resume`` and sweeps.

``summary.json`` keeps the reason as the sentence it always held (``"iterations done"``, ``"episode budget reached
(120 >= 100: 20 past it)"``, ``"step budget reached (2043 >= 2000: 43 past it)"``, ``"failed: OSError: ..."``);
:class:`StopReason` pairs that text with its :class:`StopKind`, so that no caller compares free strings.
:meth:`StopReason.parse` reads any text a run of this or an earlier version wrote.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class StopKind(enum.Enum):
    """The kinds of ending; ``value`` is how the text of that kind begins."""

    ITERATIONS = "iterations done"
    EPISODES = "episode budget reached"
    STEPS = "step budget reached"
    PATIENCE = "no new best"
    BUDGET = "budget reached"
    REPLAY_EXHAUSTED = "replay file"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    CREDENTIALS = "credentials refused"
    UNREACHABLE = "backend unreachable"
    FAILED = "failed"


#: Kinds after which the run is not over: ``train --resume`` (or the same ``compare`` again) carries it on.
UNFINISHED = frozenset({StopKind.INTERRUPTED, StopKind.CREDENTIALS, StopKind.UNREACHABLE, StopKind.FAILED})


@dataclass(frozen=True)
class StopReason:
    kind: StopKind
    text: str
    """What ``summary.json`` and the console say."""

    def __str__(self) -> str:
        return self.text

    @property
    def finished(self) -> bool:
        """True when the run ended for good (all iterations, or a stop it chose), not cut short."""
        return self.kind not in UNFINISHED

    @classmethod
    def parse(cls, text: object) -> StopReason | None:
        """The reason a summary records, or None for none; an unknown text is a stop of kind ``STOPPED``."""
        if not isinstance(text, str) or not text:
            return None
        for kind in StopKind:
            if text.startswith(kind.value):
                return cls(kind, text)
        return cls(StopKind.STOPPED, text)

    # --- the reasons a run gives ---------------------------------------------------------------------------------
    @classmethod
    def iterations_done(cls) -> StopReason:
        return cls(StopKind.ITERATIONS, StopKind.ITERATIONS.value)

    @classmethod
    def episodes(cls, total: int, most: int) -> StopReason:
        """``--max-episodes`` reached at an iteration boundary, ``total - most`` episodes past it."""
        return cls(StopKind.EPISODES, f"{StopKind.EPISODES.value} ({total} >= {most}: {total - most} past it)")

    @classmethod
    def steps(cls, total: int, most: int) -> StopReason:
        """``--max-steps`` reached at an iteration boundary, ``total - most`` steps past it."""
        return cls(StopKind.STEPS, f"{StopKind.STEPS.value} ({total} >= {most}: {total - most} past it)")

    @classmethod
    def patience(cls, iterations: int) -> StopReason:
        return cls(StopKind.PATIENCE, f"no new best for {iterations} iterations")

    @classmethod
    def of(cls, kind: StopKind, detail: str = "") -> StopReason:
        """``kind`` with ``detail`` after a colon (``failed: OSError: ...``), or the kind's own words."""
        return cls(kind, f"{kind.value}: {detail}" if detail else kind.value)
