"""JSON from outside with bounds: the one parser for every text this package did not write itself in this process.

A model's answer, an answer-cache entry, a transcript line, a policy file, ``config.json``, ``summary.json``, the
state inside ``checkpoint.npz``, a ``--config`` or ``--env-kwargs`` value: any of them may be hostile or corrupted.
:func:`loads` checks a text before ``json.loads`` sees it and refuses, with :class:`~llm_policy_gen.errors.JSONBounds`
(a ``ValueError``), one that is

* longer than ``max_chars`` (when given),
* nested deeper than :data:`MAX_DEPTH` arrays and objects (3,000 ``[`` would raise ``RecursionError`` in the
  decoder, and deep values break any code that walks them), or
* holds a number with a run of more than :data:`MAX_DIGITS` digits (Python refuses to convert an integer of more than
  4,300 digits with a ``ValueError``; a few hundred digits already overflow a float or an int64).

The checks scan the text once, skipping the insides of strings, so a long rationale or a key with digits is fine. A
``RecursionError`` or a conversion ``ValueError`` that gets past them anyway (:func:`raw_decode` from inside a
string) becomes the same error. ``json.JSONDecodeError`` (a syntax error) is left as it is: callers already say
where. Callers turn :class:`JSONBounds` into what their input needs: an invalid answer (sent back for repair), a
cache miss, or one line naming the file and exit 2 (:func:`~llm_policy_gen.storage.runlog.read_json`).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from ..errors import JSONBounds

__all__ = ["loads", "raw_decode", "check_text", "is_bomb", "MAX_DEPTH", "MAX_DIGITS", "JSONBounds"]

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects accepted (this package's own files nest fewer than 15 levels)."""
MAX_DIGITS = 100
"""Longest run of digits in a number (outside strings): a 128-bit generator state has 39."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_LONG_DIGITS = re.compile(f"[0-9]{{{MAX_DIGITS + 1},}}")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_DECODER = json.JSONDecoder()


def check_text(text: str, *, max_chars: int | None = None, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`JSONBounds` when ``text`` is over the bounds (see the module doc); syntax is not checked.

    The insides of strings are left out; the depth counted is exact for every prefix a decoder can reach (a prefix
    whose brackets do not balance is not JSON, and the decoder stops there)."""
    if max_chars is not None and len(text) > max_chars:
        raise JSONBounds(f"it is {len(text):,} characters long, over the limit of {max_chars:,}")
    deep = text.count("[") + text.count("{") > max_depth
    if not deep and not _LONG_DIGITS.search(text):
        return
    outside = _STRING.sub('""', text)
    digits = _LONG_DIGITS.search(outside)
    if digits:
        raise JSONBounds(f"it holds a number of {len(digits.group()):,} digits (at most {MAX_DIGITS} are read)")
    if deep and max(accumulate(map(_STEP.__getitem__, _NOT_BRACKET.sub("", outside))), default=0) > max_depth:
        raise JSONBounds(f"it is nested too deeply (more than {max_depth} levels)")


def loads(text: str | bytes, *, max_chars: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` within the bounds; :class:`JSONBounds` when over them, ``json.JSONDecodeError`` when the
    text is not JSON."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    check_text(text, max_chars=max_chars, max_depth=max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise JSONBounds("it is nested too deeply to be read") from None
    except ValueError as exc:  # int conversion past sys.get_int_max_str_digits()
        raise JSONBounds(f"it holds a number that cannot be read ({exc})") from None


def raw_decode(text: str, start: int) -> tuple[Any, int]:
    """``JSONDecoder().raw_decode(text, start)`` within the bounds (the value's depth checked after decoding, since
    where it ends is not known before)."""
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise JSONBounds("it is nested too deeply to be read") from None
    except ValueError as exc:
        raise JSONBounds(f"it holds a number that cannot be read ({exc})") from None
    check_text(text[start:end])
    return value, end


def is_bomb(exc: BaseException) -> bool:
    """True for what a JSON parser we do not call ourselves (an SDK's) raises on a nesting or digit bomb: a
    ``RecursionError``, or the ``ValueError`` of an integer past ``sys.get_int_max_str_digits()``."""
    return isinstance(exc, RecursionError) or (isinstance(exc, ValueError)
                                               and "integer string conversion" in str(exc))
