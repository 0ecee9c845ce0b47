"""What a run prints while it runs, on stderr.

On a terminal, a progress bar whose postfix names its numbers ("best test": the kept table's mean on this
iteration's test episodes; "held-out": its mean on the held-out episodes). Without a terminal (nohup, Slurm, CI),
one plain line per iteration instead, each number with its label: iteration, best test mean, held-out mean, the
candidates' test means (named by candidate), calls (with the failed ones and the first error: :func:`calls_text`),
tokens in and out, cost (``unpriced`` for a model the price table lacks) and the seconds elapsed since the start::

    iter 2/3: best test 500.0, held-out 500.0, candidates 1-2 test means 179.0/448.5 KEPT; 2 calls, tokens 1830 in
    + 412 out, cost $0.0031; elapsed 4.5 s

``--quiet`` prints neither (the final summary line still comes).

A console whose reader went away (``train ... 2>&1 | head -1``) stops printing; the run goes on and writes its files.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Console", "calls_text", "cost_text", "plural", "printable"]

def printable(text: object, *, lines: bool = False) -> str:
    """``text`` safe to show on a terminal: every character that is not printable (ESC and the other control
    characters, the bidi overrides and isolates such as U+202E, zero-width and other format characters, line and
    paragraph separators) is written as its escape (``\\x1b``, ``\\u202e``), so that a server's message can neither
    move the cursor, clear the screen nor reorder what is shown. ``lines``: newlines are kept (a multi-line text such
    as results.md); else they are escaped too (one line stays one line). Every outside text a command prints goes
    through this."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch.isprintable() or (lines and ch == "\n"):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _heldout(record: dict[str, Any]) -> str:
    """The held-out figure of an iteration's record; a mode that measures it only at the end (direct) says so."""
    if record.get("best_heldout_mean") is None and record.get("heldout_at_end"):
        return "at the end"
    return _num(record.get("best_heldout_mean"))


def _candidates_text(means: list[Any]) -> str:
    """The candidates' test means, labelled with the candidates they belong to (``candidates 1-3 test means
    179.0/invalid/448.5``, ``candidate 1 test mean 179.0``), ``invalid`` for an answer that was refused;
    ``candidates none of K valid`` when all were (never ``-/-``)."""
    if not means:
        return "candidates -"
    if all(m is None for m in means):
        return f"candidates none of {len(means)} valid" if len(means) > 1 else "candidate 1 invalid"
    if len(means) == 1:
        return f"candidate 1 test mean {_num(means[0])}"
    return f"candidates 1-{len(means)} test means " + "/".join("invalid" if m is None else _num(m) for m in means)


def _num(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    try:
        return f"{float(x):.{digits}f}"
    except (TypeError, ValueError):
        return "-"


def plural(n: int, word: str) -> str:
    """``1 iteration``, ``2 iterations``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def cost_text(cost_usd: float, complete: bool) -> str:
    """``$0.0123``; ``unpriced`` when the model has no price (its calls cost an unknown amount, not $0)."""
    if complete:
        return f"${cost_usd:.4f}"
    return f"${cost_usd:.4f} + unpriced calls" if cost_usd else "unpriced"


def calls_text(answered: int, failed: int, first_error: str | None) -> str:
    """``"N calls"``, and when some failed ``"N calls (M failed: first error ...)"``: N counts every call made,
    answered or failed, so that a run whose calls all failed never reads "0 calls"."""
    text = plural(int(answered) + int(failed), "call")
    if failed:
        error = printable(" ".join(str(first_error or "not recorded").split()))
        text += f" ({failed} failed: first error {error if len(error) <= 160 else error[:157] + '...'})"
    return text


class Console:
    """A :class:`~llm_policy_gen.storage.runlog.KVWriter` for the terminal, and the run's notice printer."""

    def __init__(self, total: int, desc: str, enabled: bool = True, quiet: bool = False,
                 stream: TextIO | None = None, sink: Callable[[str], None] | None = None, is_llm: bool = True,
                 proposes: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.is_llm = is_llm
        """False for the non-LLM proposers: their answers are counted as proposals, with no tokens or cost."""
        self.proposes = proposes
        """False for a run without a backend: nothing is proposed, no model is called."""
        self.sink = sink
        """Where notices go instead of the stream (a caller that collects them, as ``compare`` does)."""
        self.total = total
        self.quiet = quiet
        self.t0 = time.perf_counter()
        self.bar: Any = None
        self.lines = enabled and not quiet and not self._tty()
        if enabled and not quiet and self._tty():
            from tqdm import tqdm

            self.bar = self._safely(lambda: tqdm(total=total, desc=desc, unit="it", file=self.stream,
                                                 dynamic_ncols=True, leave=True))

    def _safely(self, show: Callable[[], Any]) -> Any:
        """Run one write to the stream; when its reader is gone (a closed pipe), print nothing more."""
        try:
            return show()
        except OSError:
            self.lines, self.bar, self.quiet = False, None, True
            return None

    def _tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def notice(self, text: str) -> None:
        """One line that is not an iteration (a backend choice, a fallback, why the run ends)."""
        text = printable(text)
        if self.sink is not None:
            self.sink(text)
            return
        if self.quiet:
            return
        bar = self.bar
        if bar is not None:
            self._safely(lambda: bar.write(text, file=self.stream))
        else:
            self._safely(lambda: print(text, file=self.stream, flush=True))

    def write(self, record: dict[str, Any]) -> None:
        bar = self.bar
        if bar is not None:
            failed = int(record.get("failed_calls") or 0)

            def show() -> None:
                if failed:  # a failed call is said above the bar, never only counted
                    bar.write(f"iter {record.get('iteration')}: " + calls_text(
                        record.get("llm_calls") or 0, failed, record.get("first_call_error")), file=self.stream)
                bar.set_postfix_str(f"best test {_num(record.get('best_test_mean'))} | held-out "
                                    f"{_heldout(record)}")
                bar.update(1)
            self._safely(show)
            return
        if not self.lines:
            return
        cands = _candidates_text(record.get("candidate_means") or [])
        kept = " KEPT" if record.get("accepted") else ""
        if not record.get("accepted_total") and record.get("candidates") != 0:  # adoptions so far (a peer judges none)
            kept = " (none accepted yet: the best is the initial table)"
        cost = cost_text(float(record.get("cost_usd_total") or 0), bool(record.get("cost_complete", True)))
        made = calls_text(record.get("llm_calls") or 0, record.get("failed_calls") or 0,
                          record.get("first_call_error"))
        calls = (f"{made}, tokens {record.get('input_tokens', 0)} in + {record.get('output_tokens', 0)} out, "
                 f"cost {cost}" if self.is_llm else f"{record.get('llm_calls', 0)} proposals" if self.proposes
                 else "no model calls")
        self._safely(lambda: print(
            f"iter {record.get('iteration')}/{self.total}: best test {_num(record.get('best_test_mean'))}, "
            f"held-out {_heldout(record)}, {cands}{kept}; "
            f"{calls}; elapsed {time.perf_counter() - self.t0:.1f} s",
            file=self.stream, flush=True,
        ))

    def close(self) -> None:
        bar = self.bar
        if bar is not None:
            self._safely(bar.close)
            self.bar = None


def print_dropped(text: str, stream: TextIO | None = None) -> None:
    """Print a line that is a by-product: when its reader is gone (a closed pipe), it is dropped."""
    try:
        print(text, file=stream or sys.stdout, flush=True)
    except OSError:
        release_stream(stream or sys.stdout)


def release_stream(stream: TextIO) -> None:
    """A standard stream whose reader went away: point it at /dev/null, so that nothing more fails on it (not even
    the flush at exit, which would print "Exception ignored ... BrokenPipeError")."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # not a real file (a test's captured stream)
        return
    os.dup2(devnull, fd)
    os.close(devnull)
