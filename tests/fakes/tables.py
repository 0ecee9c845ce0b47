"""CartPole-v1 answers for the loopback fake providers: valid full tables and a deliberately invalid one.

A :class:`TableResponder` plugs into any fake server's ``responder`` hook (``request_json -> text``). Each call gets
the next of a few linear tables over the 324 CartPole states (push toward the side the pole falls to, with
different weights), written in the proposal format ``{"rationale": ..., "rows": [{"state", "action"}, ...]}`` by the
package's own ``table`` answer format (:class:`~llm_policy_gen.formats.table.TableFormat`), so a run proposes a
different valid candidate
every iteration.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from llm_policy_gen.envs import get_spec
from llm_policy_gen.formats.base import FormatContext, Target
from llm_policy_gen.formats.table import TableFormat

__all__ = ["CARTPOLE", "CARTPOLE_STATES", "WEIGHTS", "TableResponder", "cartpole_table", "out_of_range_answer",
           "render_table_answer"]

CARTPOLE = "CartPole-v1"
CARTPOLE_STATES = 324

#: Weights on (cart position, cart velocity, pole angle, pole angular velocity) of the tables answered in turn.
WEIGHTS: tuple[tuple[float, float, float, float], ...] = (
    (0.0, 0.0, 1.0, 0.02),
    (0.0, 0.0, 1.0, 0.2),
    (0.1, 0.2, 1.0, 0.3),
)


@lru_cache(maxsize=1)
def _centers() -> np.ndarray:
    centers = get_spec(CARTPOLE).observation_discretizer().centers()  # type: ignore[attr-defined]
    assert centers.shape[0] == CARTPOLE_STATES
    return np.asarray(centers)


def cartpole_table(weights: Sequence[float]) -> np.ndarray:
    """Action 1 (push right) where ``weights . bin_centre > 0``, else 0, for every CartPole state."""
    return (_centers() @ np.asarray(weights, dtype=float) > 0).astype(np.int64)


def render_table_answer(table: np.ndarray, rationale: str) -> str:
    """``table`` as a full-table answer, written by the package's own renderer."""
    spec = get_spec(CARTPOLE)
    ctx = FormatContext(spec.observation_discretizer(), spec.action_discretizer(), np.zeros(CARTPOLE_STATES, np.int64),
                        Target("action", n_actions=2), spec)
    return TableFormat().render(np.asarray(table), ctx, rationale)


def out_of_range_answer(state: int = CARTPOLE_STATES) -> str:
    """A well-formed answer whose only row names a state outside ``0..323`` (refused by validation)."""
    return json.dumps({"rationale": "one row", "rows": [{"state": state, "action": 1}]})


class TableResponder:
    """``responder(request_json) -> text`` for the fakes: the tables of ``weights`` in turn, one per call."""

    def __init__(self, weights: Sequence[Sequence[float]] = WEIGHTS) -> None:
        self.weights = [tuple(w) for w in weights]
        self.calls = 0

    def answer(self, k: int) -> str:
        """The ``k``-th answer (0-based, cycling through the weights)."""
        w = self.weights[k % len(self.weights)]
        return render_table_answer(cartpole_table(w), f"push toward the fall, weights {w}")

    def __call__(self, body: dict[str, Any]) -> str:
        text = self.answer(self.calls)
        self.calls += 1
        return text


class FillThenGo:
    """A responder that proves a limit on calls in flight without timing windows: every request is held until
    ``limit`` requests are in flight at once, then they all go (and every later one at once). The peak therefore
    reaches the limit however fast or busy the machine is, and a limiter that let more in shows a higher peak. Waits
    at most ``patience_s`` for that first fill, so a broken limiter fails the test rather than hanging it.
    ``peak`` and ``total`` count the requests; answers come from ``TableResponder``."""

    def __init__(self, limit: int, patience_s: float = 30.0) -> None:
        self.limit, self.patience_s = limit, patience_s
        self.tables = TableResponder()
        self.full = threading.Event()
        self.lock = threading.Lock()
        self.now = self.peak = self.total = 0

    def __call__(self, body: dict[str, Any]) -> str:
        with self.lock:
            self.now += 1
            self.total += 1
            self.peak = max(self.peak, self.now)
            text = self.tables(body)
            if self.now >= self.limit:
                self.full.set()
        try:
            self.full.wait(self.patience_s)
        finally:
            with self.lock:
                self.now -= 1
        return text
