"""A GGUF model's chat template (``tokenizer.chat_template``), compiled once and rendered under limits.

The template is Jinja code from the model file: it may be broken, or loop for as long as it likes. It is compiled
when the model is loaded (:func:`compile_template`: a syntax error is one line, :class:`TemplateProblem`) and each
prompt is rendered (:meth:`ChatTemplate.render`) in Jinja's immutable sandbox, as llama-cpp-python's
``Jinja2ChatFormatter`` does (same globals, ``trim_blocks`` and ``lstrip_blocks``), with three bounds:

* **time**: the render stops with :class:`TemplateTimeout` once the call's deadline has passed (the caller's
  ``--timeout``, which covers rendering and generation together). A trace function on the rendering thread checks
  the clock at each line of the compiled template and at each call of a Python function it makes, so that any loop
  stops, whatever it iterates over;
* **size**: the rendered prompt is at most :data:`MAX_PROMPT_CHARS` characters (:class:`TemplateProblem` past it);
* **values**: ``*`` and ``**`` that would build a sequence or a number of more than :data:`MAX_VALUE` items or digits,
  and ``%`` formats with widths of more than :data:`MAX_VALUE` characters, are refused before they are computed.

A template that raises (``raise_exception``, an undefined name, a recursion) fails the call with its message.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import Any

__all__ = ["ChatTemplate", "ChatPrompt", "TemplateProblem", "TemplateTimeout", "compile_template", "syntax_error_text",
           "MAX_PROMPT_CHARS", "MAX_VALUE"]

MAX_PROMPT_CHARS = 4 * 1024 * 1024
"""Longest rendered prompt (far past any context this package uses)."""
MAX_VALUE = 100_000
"""Most items of a sequence built by ``*``, digits of a number built by ``**``, or width of a ``%`` format."""
_WIDE_FORMAT = re.compile(r"%[-+ #0]*(?:\d{6,}|\*)|%[-+ #0]*\d*\.(?:\d{6,}|\*)")


class TemplateProblem(ValueError):
    """The chat template cannot be compiled, or its rendering passed a bound or raised."""


class TemplateTimeout(TemplateProblem):
    """Rendering passed the call's deadline."""


class _Stop(BaseException):
    """Raised by the trace function at the deadline."""


@dataclass(frozen=True)
class ChatPrompt:
    """A rendered prompt and the stop string of its template (the end-of-sequence token's text)."""

    text: str
    stop: list[str]


def _sandbox() -> Any:
    from jinja2 import BaseLoader
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):  # type: ignore[misc]
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

    env = Bounded(loader=BaseLoader(), trim_blocks=True, lstrip_blocks=True)
    env.concat = _bounded_concat  # type: ignore[method-assign]  # Template.render joins with ``environment.concat``
    return env


def _check_binop(operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_VALUE:
                raise TemplateProblem(f"the chat template builds a sequence of {len(seq) * n:,} items")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 \
                and right * max(1.0, len(str(abs(left)))) > MAX_VALUE:
            raise TemplateProblem(f"the chat template computes {left} ** {right}")
    elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
        raise TemplateProblem("the chat template formats a value wider than "
                              f"{MAX_VALUE:,} characters")


def _bounded_concat(chunks: Iterable[str]) -> str:
    out: list[str] = []
    size = 0
    for c in chunks:
        size += len(c)
        if size > MAX_PROMPT_CHARS:
            raise TemplateProblem(f"the chat template renders more than {MAX_PROMPT_CHARS:,} characters")
        out.append(c)
    return "".join(out)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _raise_exception(message: str) -> None:
    raise TemplateProblem(f"the chat template refused the messages: {message}")


@dataclass
class ChatTemplate:
    """A compiled chat template with the special tokens' texts it is rendered with."""

    template: Any
    bos_token: str
    eos_token: str

    def render(self, messages: list[dict[str, str]], deadline: float,
               clock: Callable[[], float] = time.monotonic) -> ChatPrompt:
        """The prompt for ``messages`` (a generation prompt added), or :class:`TemplateTimeout` once ``clock()``
        passes ``deadline``; any error of the template is a :class:`TemplateProblem`."""
        from jinja2 import TemplateError

        def check(frame: FrameType, event: str, arg: Any) -> Any:
            if clock() > deadline:
                raise _Stop  # a BaseException: no ``except Exception`` inside the template's code swallows it
            return check if frame.f_code.co_filename == "<template>" else None

        before = sys.gettrace()
        sys.settrace(check)
        try:
            text = self.template.render(
                messages=messages, bos_token=self.bos_token, eos_token=self.eos_token,
                raise_exception=_raise_exception, add_generation_prompt=True, functions=None,
                function_call=None, tools=None, tool_choice=None, strftime_now=_strftime_now)
        except _Stop:
            raise TemplateTimeout("rendering the chat template passed --timeout") from None
        except TemplateProblem:
            raise
        except (TemplateError, ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError,
                RecursionError, MemoryError) as exc:
            raise TemplateProblem(f"the chat template failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        finally:
            sys.settrace(before)
        return ChatPrompt(text, [self.eos_token] if self.eos_token else [])


def syntax_error_text(exc: Exception) -> str:
    """A Jinja ``TemplateSyntaxError`` in one short line, with its line number."""
    line, message = getattr(exc, "lineno", None), getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__} at line {line}: {str(message)[:200]}"


def compile_template(source: str, bos_token: str, eos_token: str) -> ChatTemplate:
    """``source`` compiled in the bounded sandbox; a syntax error is a :class:`TemplateProblem` naming its line."""
    from jinja2 import TemplateSyntaxError

    try:
        template = _sandbox().from_string(source)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(syntax_error_text(exc)) from None
    except RecursionError:
        raise TemplateProblem("the chat template is nested too deeply to compile") from None
    return ChatTemplate(template, bos_token, eos_token)
