"""The LLM session: every model call of a run goes through here, in every mode.

One place holds the call, the repair, the budget, the cost, the answer cache and the transcript:

* :meth:`LLMSession.sample` asks for K candidates of one prompt **at once** (a thread per candidate, at most
  ``max_concurrent`` calls in flight through the :class:`~.usage.CallLimiter`, and no more threads than the client
  serves calls at once: a local server's one call at a time means one candidate after another). Each candidate is
  its own conversation: an answer the :class:`~llm_policy_gen.formats.base.AnswerFormat` refuses goes back to the
  model with the errors, up to ``repair_attempts`` more times. Each attempt is one call with its :class:`~.base.CallKey`
  ``(iteration, candidate, attempt[, state])`` and one line of ``transcripts.jsonl``.
* Where an answer comes from, in order: a call recorded before a resume (same key and messages: never sent again,
  its tokens counted once; :class:`~.transcript.RecordedCalls`), the on-disk answer cache, then the client.
* The budget counts calls in flight: each call reserves its estimated cost before it starts and settles at its
  real cost, so K concurrent calls cannot together pass ``--budget-usd`` (:class:`~.usage.Budget`).
* Every known secret (keys, URL passwords and their ``Basic`` form) is scrubbed from every string of an answer
  before anything is written, and again from every transcript line as it is written.
* A call that fails after the retry policy is written as a failure (``failed: true`` and its ``error``), which is
  what replay reproduces; failed calls are counted (``Usage.failed_calls``) and the run's first error is kept
  (:attr:`LLMSession.first_error`), so that the console and the summary can say so.
* Every call carries a sampling seed, :func:`~llm_policy_gen.clients.base.call_seed` of the run seed and the call's
  key (written to its transcript line): the K candidates of a prompt are K different requests, a repair is never
  sent at the settings of the refused answer, and replay, resume and the answer cache see the same seeds again.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import BackendAuthError, BackendError, BackendUnreachable, ProposalError, ReplayExhausted
from ..formats.base import AnswerFormat, FormatContext, Parsed
from .base import CallKey, Completion, LLMClient, Message, OutputSpec, Request, call_seed, calls_at_once, is_free
from .cache import ResponseCache
from .keys import redact, redact_all
from .pricing import cost_usd
from .progress import slow_call_text
from .sdk import SDKClient
from .transcript import RecordedCalls, Transcript
from .usage import MAX_TOKENS, Budget, CallLimiter, LocalLimiter, Usage, clamp_usage

__all__ = ["Answer", "LLMSession", "MAX_ANSWER_CHARS"]

V = TypeVar("V")

MAX_ANSWER_CHARS = 256 * 1024
"""Default bound on an answer's text: a longer answer is refused as invalid and stored cut to this length (never
parsed, cached or sent back whole)."""
QUOTE_CHARS = 4096
"""At most this much of an over-long answer, and of the errors, goes back to the model in a repair message."""


@dataclass
class Answer(Generic[V]):
    """One candidate's outcome: the validated answer or why there is none."""

    candidate: int
    parsed: Parsed[V] | None = None
    errors: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    failed: bool = False
    """The last call failed in transport (after the retry policy)."""
    unreachable: bool = False
    """... and no attempt reached the server."""
    stop: str | None = None
    """Why no more calls may be made in this run ('budget reached', 'replay exhausted ...')."""
    text: str = ""
    """The last answer text (refused or not)."""

    @property
    def ok(self) -> bool:
        return self.parsed is not None


class LLMSession:
    """Calls one client for a run: candidates, repairs, budget, cost, cache, recorded calls and the transcript.

    Args:
        client: The transport.
        transcript: Where call lines go.
        repair_attempts: Follow-up calls with the validation errors after a refused answer.
        budget: The spending ceiling shared by every call of the run.
        prices_file: Price table (None: the shipped one).
        cache: The answer cache, or None.
        recorded: Calls recorded before a resume, answered from the record.
        limiter: Bounds calls in flight.
        log: One-line notices for the console.
        max_answer_chars: Longest answer text accepted (see :data:`MAX_ANSWER_CHARS`).
        seed: The run seed, from which every call's sampling seed is derived.
    """

    def __init__(
        self,
        client: LLMClient,
        transcript: Transcript,
        *,
        repair_attempts: int = 2,
        budget: Budget | None = None,
        prices_file: str | None = None,
        cache: ResponseCache | None = None,
        recorded: RecordedCalls | None = None,
        limiter: CallLimiter | None = None,
        max_concurrent: int = 8,
        log: Callable[[str], None] = lambda s: None,
        seed: int = 0,
        max_answer_chars: int = MAX_ANSWER_CHARS,
    ) -> None:
        self.client = client
        self.transcript = transcript
        self.repair_attempts = int(repair_attempts)
        self.budget = budget or Budget(None)
        self.prices_file = prices_file
        self._free = is_free(client)
        """A model on this machine: calls cost 0 and need no price."""
        self.cache = cache
        self.recorded = recorded or RecordedCalls()
        self.limiter: CallLimiter = limiter or LocalLimiter(max_concurrent)
        served = calls_at_once(client)
        self.max_concurrent = max(1, min(int(max_concurrent), served or int(max_concurrent)))
        """Candidates asked at once: ``max_concurrent``, and no more than the client serves at once (a candidate
        waiting in the client must not hold a sweep's call slot or budget that another run could use)."""
        self.log = log
        self.usage = Usage()
        self.calls_ok = 0
        """Calls that got an answer from the server, the cache or a record (for the unreachable check)."""
        self.calls_tried = 0
        self._lock = threading.Lock()
        self._notices: set[str] = set()
        self.max_answer_chars = int(max_answer_chars)
        self.run_seed = int(seed)
        self.first_error: str | None = None
        """The error of the run's first failed call (recorded ones included), for the console and the summary."""
        self.answers_valid = 0
        """Answers that passed validation (a run whose calls were answered but never validly ends with exit 1)."""
        self.first_invalid: str | None = None
        """Why the run's first refused answer was refused."""

    @property
    def provider(self) -> str:
        return self.client.provider

    @property
    def model(self) -> str:
        return self.client.model

    # ------------------------------------------------------------------ public
    def sample(
        self,
        messages: Sequence[Message],
        fmt: AnswerFormat[V],
        ctx: FormatContext,
        *,
        iteration: int,
        k: int,
        repair: Callable[[list[str]], str],
        state: int | None = None,
        first: int = 1,
        repairs: int | None = None,
        record: dict[str, Any] | None = None,
    ) -> list[Answer[V]]:
        """Ask for candidates ``first .. first+k-1`` of ``messages`` concurrently; answers in candidate order.

        ``repairs`` overrides the session's number of repair attempts (the direct mode asks without repairs).
        """
        output = OutputSpec(f"{fmt.name}_answer", fmt.json_schema(ctx))
        cands = list(range(first, first + k))
        n_rep = self.repair_attempts if repairs is None else int(repairs)
        def one(candidate: int) -> Answer[V]:
            return self._conversation(candidate, messages, output, fmt, ctx, iteration, repair, state, record, n_rep)

        if len(cands) == 1:
            return [one(cands[0])]
        with ThreadPoolExecutor(max_workers=min(len(cands), self.max_concurrent),
                                thread_name_prefix="llm-call") as pool:
            return list(pool.map(one, cands))

    def state_dict(self) -> dict[str, Any]:
        state = {"usage": self.usage.to_dict(), "spent_usd": self.budget.spent, "calls_ok": self.calls_ok,
                 "calls_tried": self.calls_tried, "first_error": self.first_error,
                 "answers_valid": self.answers_valid, "first_invalid": self.first_invalid}
        mode = getattr(self.client, "structured_mode", None)
        if isinstance(mode, str):  # a structured-output fallback the client made holds on resume
            state["structured_mode"] = mode
        return state

    def load_state_dict(self, state: dict[str, Any], restore_budget: bool = True) -> None:
        """Restore counters; ``restore_budget`` False leaves a budget shared with other runs as it is."""
        self.usage = Usage.from_dict(state.get("usage", {}))
        if restore_budget:
            self.budget.spent = float(state.get("spent_usd", 0.0))
        self.calls_ok = int(state.get("calls_ok", 0))
        self.calls_tried = int(state.get("calls_tried", 0))
        self.first_error = state.get("first_error") or None
        # A checkpoint from before this count: its answered calls are taken as valid (never a false failure).
        self.answers_valid = int(state.get("answers_valid", self.calls_ok))
        self.first_invalid = state.get("first_invalid") or None
        if self.calls_ok and isinstance(self.client, SDKClient):
            self.client.reached = True  # this run's calls were answered before: a refused connection is retried
        mode = state.get("structured_mode")
        if isinstance(mode, str) and isinstance(getattr(self.client, "structured_mode", None), str):
            self.client.structured_mode = mode  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ one candidate
    def _conversation(
        self,
        candidate: int,
        messages: Sequence[Message],
        output: OutputSpec,
        fmt: AnswerFormat[V],
        ctx: FormatContext,
        iteration: int,
        repair: Callable[[list[str]], str],
        state: int | None,
        record: dict[str, Any] | None,
        repairs: int,
    ) -> Answer[V]:
        answer: Answer[V] = Answer(candidate)
        convo = list(messages)
        for attempt in range(1, repairs + 2):
            key = CallKey(iteration, candidate, attempt, state)
            request = Request(tuple(convo), output, key, seed=call_seed(self.run_seed, key))
            rec: dict[str, Any] = {**request.key.to_dict(), **(record or {}), "seed": request.seed,
                                   "backend": self.provider,
                                   "model": self.model, "messages": [m.to_dict() for m in convo],
                                   "prompt_chars": sum(len(m.content) for m in convo)}
            t_call = time.perf_counter()
            comp, usage, source, error = self._call(request)
            answer.usage.add(usage)
            if isinstance(error, (ReplayExhausted, _BudgetStop)):
                answer.stop = str(error)
                return answer
            if error is not None:
                msg = redact(str(error))
                rec.update(response_text="", valid=False, errors=[msg], failed=True, error=msg,
                           unreachable=isinstance(error, BackendUnreachable), input_tokens=0, output_tokens=0,
                           cost_usd=0.0, cached=False, reused=source == "recorded",
                           latency_s=round(time.perf_counter() - t_call, 4))
                self.transcript.write(rec)
                with self._lock:
                    self.first_error = self.first_error or msg
                answer.errors, answer.failed = [msg], True
                answer.unreachable = isinstance(error, BackendUnreachable)
                return answer
            assert comp is not None
            answer.text = comp.text
            too_long = comp.extra.get("answer_chars")
            errors: list[str] = []
            if too_long:  # stored cut, refused without parsing
                rec["answer_chars"] = too_long
                parsed, errors = None, [f"the answer was {too_long:,} characters, over the limit of "
                                        f"{self.max_answer_chars:,} characters: answer much more compactly"]
            else:
                try:
                    parsed = fmt.parse(comp.text, ctx)
                except ProposalError as exc:
                    parsed, errors = None, exc.errors
            if comp.truncated and parsed is None:
                errors = [*errors, "the answer was cut at the output-token limit: answer more compactly"]
            rec.update(comp.transcript_fields(), valid=parsed is not None, errors=errors,
                       notes=parsed.notes if parsed else [], failed=False, cost_usd=round(usage.cost_usd, 8),
                       cached=source == "cache", reused=source == "recorded")
            notice = comp.extra.get("structured_output_fallback")
            if notice:
                rec["notice"] = notice
                self._notice(f"{self.provider}: {notice}")
            self.transcript.write(rec)
            with self._lock:
                self.answers_valid += int(parsed is not None)
                if parsed is None and self.first_invalid is None:
                    self.first_invalid = redact("; ".join(errors[:2]) or "the answer was refused")
            if parsed is not None:
                answer.parsed, answer.errors = parsed, []
                return answer
            answer.errors = errors
            convo = convo + [Message("assistant", _quote(comp.text, too_long) if too_long else comp.text),
                             Message("user", repair(_few(errors)))]
        return answer

    def _notice(self, text: str) -> None:
        with self._lock:
            if text in self._notices:
                return
            self._notices.add(text)
        self.log(text)

    def _estimate(self, request: Request) -> float:
        chars = sum(len(m.content) for m in request.messages)
        guess = cost_usd(self.provider, self.model, chars // 3, 2000, self.prices_file)
        return guess or 0.0

    def _call(self, request: Request) -> tuple[Completion | None, Usage, str, BaseException | None]:
        """One call: from a record, the cache or the client. Returns (completion, usage, source, error)."""
        with self._lock:
            self.calls_tried += 1
        rec = self.recorded.take(request.key, request.messages)
        if rec is not None:
            usage = Usage(int(rec.get("input_tokens") or 0), int(rec.get("output_tokens") or 0),
                          int(rec.get("cached_input_tokens") or 0), float(rec.get("cost_usd") or 0.0),
                          calls=0 if rec.get("failed") else 1, cached_calls=int(bool(rec.get("cached"))),
                          failed_calls=int(bool(rec.get("failed"))))
            self._count(usage, ok=not rec.get("failed"))
            self.budget.settle(0.0, usage.cost_usd)
            if rec.get("failed"):
                err_cls = BackendUnreachable if rec.get("unreachable") else BackendError
                return None, usage, "recorded", err_cls(str(rec.get("error") or "recorded call failed"))
            comp = Completion(text=str(rec.get("response_text", "")), input_tokens=usage.input_tokens,
                              output_tokens=usage.output_tokens, cached_input_tokens=usage.cached_input_tokens,
                              latency_s=float(rec.get("latency_s") or 0.0), model=str(rec.get("response_model", "")),
                              finish_reason=rec.get("finish_reason"), truncated=bool(rec.get("truncated", False)),
                              refusal=rec.get("refusal"),
                              structured_output=str(rec.get("structured_output") or "json_schema"))
            if isinstance(rec.get("answer_chars"), int):  # recorded over-long: refused again, the same way
                comp.extra["answer_chars"] = rec["answer_chars"]
            return comp, usage, "recorded", None
        if self.cache is not None:
            hit = self.cache.get(request)
            if hit is not None:
                usage = Usage(calls=1, cached_calls=1)
                self._count(usage, ok=True)
                return _bounded(hit, self.max_answer_chars), usage, "cache", None
        estimate = self._estimate(request) if self.client.is_llm else 0.0
        if self.client.is_llm and not self.budget.reserve(estimate):
            return None, Usage(), "", _BudgetStop("budget reached")
        try:
            with self.limiter.slot():
                comp = self.client.complete(request)
        except BackendAuthError:
            self.budget.settle(estimate, 0.0)
            raise
        except (ReplayExhausted, BackendError) as exc:
            self.budget.settle(estimate, 0.0)
            usage = Usage(failed_calls=int(isinstance(exc, BackendError)))
            self._count(usage, ok=False)
            return None, usage, "client", exc
        comp = clamp_usage(_bounded(comp, self.max_answer_chars))
        slow = slow_call_text(self.provider, request.key, comp)  # a long call is said when it ends, a fast one not
        if slow:
            self.log(slow)
        if comp.usage_clamped:
            self._notice(f"{self.provider}: the server reported token usage out of range "
                         f"({', '.join(sorted(comp.usage_clamped))}); counted as 0..{MAX_TOKENS:,} tokens, "
                         "recorded as usage_clamped in transcripts.jsonl")
        price = 0.0 if self._free else cost_usd(self.provider, self.model, comp.input_tokens, comp.output_tokens,
                                                 self.prices_file, comp.cached_input_tokens, comp.cache_write_tokens)
        cost = price or 0.0
        self.budget.settle(estimate, cost)
        usage = Usage(comp.input_tokens, comp.output_tokens, comp.cached_input_tokens, cost, calls=1,
                      unpriced_calls=int(price is None and self.client.is_llm))
        self._count(usage, ok=True)
        if self.cache is not None and not comp.refusal and "answer_chars" not in comp.extra:
            self.cache.put(request, comp)
        return comp, usage, "client", None

    def _count(self, usage: Usage, ok: bool) -> None:
        with self._lock:
            self.usage.add(usage)
            self.calls_ok += int(ok)


def _redacted(comp: Completion) -> Completion:
    """``comp`` with every known secret scrubbed from each of its strings (a server may echo a key or an
    ``Authorization`` header in any field: the text, the model name, the finish reason, the extras)."""
    return dataclasses.replace(
        comp, text=redact(comp.text), model=redact(comp.model), refusal=redact(comp.refusal) if comp.refusal else None,
        finish_reason=redact(comp.finish_reason) if comp.finish_reason else comp.finish_reason,
        structured_output=redact(comp.structured_output), extra=redact_all(comp.extra))


def _bounded(comp: Completion, cap: int) -> Completion:
    """``comp`` scrubbed of secrets (:func:`_redacted`) and, when its text is longer than ``cap`` characters, cut
    to ``cap`` with its length kept in ``extra["answer_chars"]``. The text is cut with a margin before scrubbing and
    to ``cap`` after, so no secret straddles the cut; a huge answer is never scrubbed, stored or parsed whole."""
    n = len(comp.text)
    if n <= cap:
        return _redacted(comp)
    comp = _redacted(dataclasses.replace(comp, text=comp.text[: cap + 1024]))
    return dataclasses.replace(comp, text=comp.text[:cap], extra={**comp.extra, "answer_chars": n})


def _quote(text: str, n: int) -> str:
    """The start of an over-long answer of ``n`` characters, as the repair conversation quotes it back."""
    return f"{text[:QUOTE_CHARS]}\n[... the remaining {n - QUOTE_CHARS:,} characters are not repeated here]"


def _few(errors: list[str], each: int = 300, most: int = 10) -> list[str]:
    """At most ``most`` errors of at most ``each`` characters, for a repair message of a few KB at most."""
    out = [e if len(e) <= each else e[: each - 3] + "..." for e in errors[:most]]
    return out + ([f"... and {len(errors) - most} more errors"] if len(errors) > most else [])


class _BudgetStop(Exception):
    """The next call would pass the budget."""
