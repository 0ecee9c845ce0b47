"""``replay:PATH``: answers each call with the recorded answer of the same (iteration, candidate, attempt[, state]).

Any run's ``transcripts.jsonl`` replays that run. Answers are found by their :class:`~.base.CallKey`, never by line
order, so K concurrent candidates, repairs and failed calls replay exactly: a call recorded as failed (``failed:
true``) fails again with its recorded error, rather than being parsed as an empty answer. A key with no recorded
answer raises :class:`~llm_policy_gen.errors.ReplayExhausted`, which ends the run cleanly.

An empty file, a file that is not JSONL, or a line without a string ``response_text`` is refused at once
(:class:`~llm_policy_gen.errors.BackendConfigError`, exit 2). Lines may be hand-written: ``{"response_text": "..."}``
is enough (such lines count as iteration 1, 2, ... in order, candidate 1, attempt 1). A packed line (a call no model
answered, :mod:`~.transcript`) is read whole through :func:`~.transcript.unpack_lines`, and one whose texts cannot be
rebuilt is refused the same way. :attr:`ReplayClient.source`
holds what the recorded run was made for (environment, table size, mode, format), which the engine compares with
the replaying run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..errors import BackendConfigError, BackendError, JSONBounds, ReplayExhausted, UserError
from ..storage.safe_json import loads
from .base import CallKey, ClientSettings, Completion, Request
from .transcript import unpack_lines

__all__ = ["ReplayClient", "SOURCE_FIELDS"]

#: Transcript fields that say what a recorded run was made for.
SOURCE_FIELDS = ("env_id", "n_states", "n_actions", "mode", "format")


class ReplayClient:
    """Replays recorded answers by call key."""

    provider = "replay"
    is_llm = False
    Options = ClientSettings
    """A replayed run takes the clients' options (its answers' bound, ...), those it does not use included."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            from ..run.files import RunDir

            self.path = RunDir(self.path).transcripts
        self.model = str(self.path)
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BackendConfigError(f"replay file {self.path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise BackendConfigError(f"cannot read replay file {self.path}: {exc}") from None
        self.answers: dict[CallKey, dict[str, Any]] = {}
        numbers, objs = self._lines(raw)
        try:  # a packed line (a call no model answered) is given back whole
            whole = unpack_lines(objs, f"replay file {self.path}")
        except UserError as exc:
            raise BackendConfigError(str(exc)) from None
        for k, obj in zip(numbers, whole, strict=True):
            if not isinstance(obj.get("response_text"), str):
                raise BackendConfigError(
                    f"replay file {self.path} line {k} has no string 'response_text' (use a transcripts.jsonl)"
                )
            self.answers[CallKey.of(obj)] = obj
        if not self.answers:
            raise BackendConfigError(f"replay file {self.path} is empty: give a run's transcripts.jsonl")
        first = next(iter(self.answers.values()))
        self.source: dict[str, Any] = {f: first[f] for f in SOURCE_FIELDS if f in first}
        self.source_backend = str(first.get("backend", ""))
        self.source_model = str(first.get("model", ""))

    def _lines(self, raw: str) -> tuple[list[int], list[dict[str, Any]]]:
        """The file's JSON objects and their line numbers; hand-written lines without an ``iteration`` get 1, 2, ..."""
        numbers: list[int] = []
        objs: list[dict[str, Any]] = []
        hand_written = 0
        for k, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except json.JSONDecodeError as exc:
                raise BackendConfigError(f"replay file {self.path} line {k} is not JSON ({exc.msg})") from None
            except JSONBounds as exc:
                raise BackendConfigError(f"replay file {self.path} line {k} cannot be read as JSON: {exc}") from None
            if not isinstance(obj, dict) or "response_text" not in obj:
                raise BackendConfigError(
                    f"replay file {self.path} line {k} has no string 'response_text' (use a transcripts.jsonl)"
                )
            if "iteration" not in obj:
                hand_written += 1
                obj = {**obj, "iteration": hand_written}
            numbers.append(k)
            objs.append(obj)
        return numbers, objs

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "replay",
            "model": str(self.path),
            "is_llm": False,
            "answers": len(self.answers),
            "source_backend": self.source_backend,
            "source_model": self.source_model,
            "source": self.source,
        }

    def complete(self, request: Request) -> Completion:
        line = self.answers.get(request.key)
        if line is None:
            k = request.key
            raise ReplayExhausted(
                f"replay file {self.path} has no answer for iteration {k.iteration}, candidate {k.candidate}, "
                f"attempt {k.attempt}" + (f", state {k.state}" if k.state is not None else "")
            )
        if line.get("failed"):
            raise BackendError(str(line.get("error") or "recorded call failed"))
        t0 = time.perf_counter()
        return Completion(
            text=line["response_text"],
            latency_s=time.perf_counter() - t0,
            model=f"replay of {self.source_backend or 'unknown'}:{line.get('model', '')}",
            finish_reason=line.get("finish_reason"),
            truncated=bool(line.get("truncated", False)),
            refusal=line.get("refusal"),
            structured_output=str(line.get("structured_output")
                                  or ("json_schema" if request.output.json_schema is not None else "none")),
            extra={"replayed": request.key.to_dict()},
        )
