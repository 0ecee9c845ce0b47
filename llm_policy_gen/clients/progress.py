"""What a long model call says on the console, so that a minute without output is never silent.

* :func:`slow_call_text`: the line the call session prints when a call that took at least :data:`SLOW_CALL_S` ends:
  which call, its tokens in and out, its seconds and its output tokens per second. A faster call says nothing, so a
  run against a quick server (and every test against a fake one) prints only its iteration lines.
* :class:`Ticker`: for a model that generates in this process (``llamacpp:``), a line every :data:`TICK_S` seconds
  while a call generates: the tokens so far and their rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .base import CallKey, Completion

__all__ = ["SLOW_CALL_S", "TICK_S", "slow_call_text", "call_label", "Ticker"]

SLOW_CALL_S = 10.0
"""A call that took at least this many seconds is said when it ends."""
TICK_S = 30.0
"""How often a generation in this process says how far it has got."""


def call_label(key: CallKey) -> str:
    """``iteration 3 candidate 2`` (``, repair 1`` for a second attempt, ``, state 7`` in direct mode)."""
    text = f"iteration {key.iteration} candidate {key.candidate}"
    if key.attempt > 1:
        text += f", repair {key.attempt - 1}"
    if key.state is not None:
        text += f", state {key.state}"
    return text


def slow_call_text(who: str, key: CallKey, comp: Completion, slow_s: float | None = None) -> str | None:
    """The line of a call that took at least ``slow_s`` seconds (default :data:`SLOW_CALL_S`), else None."""
    seconds = float(comp.latency_s)
    if seconds < (SLOW_CALL_S if slow_s is None else slow_s):
        return None
    rate = comp.output_tokens / seconds if seconds > 0 else 0.0
    return (f"{who}: {call_label(key)} took {seconds:.1f} s: tokens {comp.input_tokens} in + {comp.output_tokens} "
            f"out ({rate:.1f} tokens/s out)")


class Ticker:
    """Says, at most every ``every_s`` seconds, how many tokens a generation has written and at what rate.

    Args:
        say: Where the line goes (None: nowhere).
        who: The line's prefix (the provider).
        key: The call's key.
        every_s: Seconds between lines (default :data:`TICK_S`).
        clock: The time source (``time.monotonic``).
    """

    def __init__(self, say: Callable[[str], None] | None, who: str, key: CallKey, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.say, self.who, self.key = say, who, key
        self.every_s = TICK_S if every_s is None else float(every_s)
        self.clock = clock
        self.t0 = clock()
        self.next_at = self.t0 + self.every_s

    def tokens(self, written: int) -> None:
        """``written`` tokens generated so far: a line when the next one is due."""
        if self.say is None:
            return
        now = self.clock()
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        seconds = now - self.t0
        self.say(f"{self.who}: {call_label(self.key)} generating: {written} tokens in {seconds:.0f} s "
                 f"({written / seconds if seconds > 0 else 0.0:.1f} tokens/s)")
