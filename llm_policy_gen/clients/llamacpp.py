"""``llamacpp:PATH.gguf``: a local GGUF model run in this process by llama.cpp (``pip install -e '.[local]'``).

No server, no key, no network, cost 0. The model is loaded once per process (:func:`~.local_model.load_model`,
keyed by the file, the context size and the thread count) and shared by every client that names the same file; one
``Llama`` object is not thread-safe, so calls are serialised by a lock per model, and the K candidates of an
iteration queue behind each other (each still a distinct sample: its seed is a function of the run seed and the
call's key, :func:`~.base.call_seed`).

* **Chat template**: the model's own (``tokenizer.chat_template`` in the GGUF metadata), compiled when the model is
  loaded and rendered under limits (:mod:`.chat_template`: Jinja's sandbox, a deadline and size bounds); its sha256 and
  name are recorded. A model without one (a base model), or whose template does not compile, is refused when the
  backend is built for a mode that sends chat messages (:meth:`LlamaCppClient.check_chat`), before the run starts.
* **Structured output**: ``json_schema`` turns the answer format's JSON schema into a GBNF grammar with
  ``LlamaGrammar.from_json_schema`` (llama.cpp's converter), so decoding cannot leave the schema; a schema the
  converter refuses is a refusal and the client steps down once (say so) to ``json_mode`` (any JSON, the generic
  JSON grammar), then to ``prompt`` (no grammar). llama-cpp-python's own ``response_format`` path falls back to the
  generic JSON grammar silently; this client builds the grammar itself so that a step down is never silent.
  Which schema keywords the converter enforces is tested in ``tests/test_schema_bounds.py``.
* **Context**: the model's training context (``n_ctx_train``) unless ``--llamacpp-n-ctx`` is given. The answer's token
  cap is what the context leaves after the prompt (at most ``--max-output-tokens``). A context that cannot hold the
  first prompt's fixed part and as much again for an answer is refused before the run starts, naming the smallest
  ``--llamacpp-n-ctx`` that does (:func:`~llm_policy_gen.backends.factory.check_context`, through
  :meth:`LlamaCppClient.chat_tokens`).
* **Tokens** are counted by the model's tokenizer (:meth:`LlamaCppClient.count_tokens`, which the prompt builder
  uses for ``--max-prompt-tokens``).
* **Threads**: ``--llamacpp-threads``, else the usable cores (``os.sched_getaffinity``) divided by the processes that
  share them (``LLM_POLICY_GEN_PROCESSES``, which a sweep with ``--workers N`` sets to N).
* **Timeout**: ``--timeout`` bounds one attempt from the moment it has the model: rendering the chat template and
  generating (checked at every token; prompt evaluation itself cannot be interrupted). A call that passes it fails
  with a timeout (0 tokens, no text) and is not retried: the same prompt on the same machine would take as long again.
* **Progress**: the console hears a line before the model loads (file and size) and one after it (seconds); a
  generation says every 30 s how many tokens it has written (:class:`~.progress.Ticker`), and the session says a
  call that took 10 s or more when it ends.
* **Identity**: :meth:`describe` records the file's sha256, size, quantisation, context, chat template and the
  llama-cpp-python version in ``config.json``; the answer cache keys on the sha256, not the path
  (:attr:`cache_identity`), so a moved or renamed file keeps its cached answers and another file with the same name
  does not get them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, ClassVar

from ..errors import BackendConfigError
from ..registry import setting
from .base import ClientOptions, ClientSettings, Completion, Message, Request, call_seed
from .chat_template import TemplateProblem, TemplateTimeout
from .local_model import LocalModel, chat_refusal, check_gguf, default_threads, load_model, model_identity
from .profiles import ClientProfile
from .progress import Ticker
from .retry import FaultKind
from .sdk import SDKClient

__all__ = ["LlamaCppClient", "LlamaCppSettings", "LocalModel", "load_model", "model_identity", "PROFILE"]

#: What the in-process runtime accepts: llama.cpp samples at any temperature >= 0 (0 is greedy).
PROFILE = ClientProfile("llamacpp", "llama.cpp (in process)", (0.0, 5.0), "max_tokens")


class _Deadline(Exception):
    """The attempt passed ``--timeout`` while generating."""


class _SchemaRefused(Exception):
    """llama.cpp's converter could not turn the answer's schema into a grammar."""


#: A character inside a JSON string as JSON allows it: llama-cpp-python's converter (0.3.36) lets any character but a
#: quote or a backslash through, raw line breaks and other control characters included, which no JSON parser takes
#: (Qwen2.5-Coder-0.5B wrote multi-line rationales: 4 of 60 FrozenLake answers were refused for it, in process and
#: through ``llama_cpp.server``, which uses the same converter); llama.cpp's own converter excludes them, as here.
_LOOSE_CHAR = r'char ::= [^"\\] | '
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] | '


def schema_grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar of ``schema`` (keys in the schema's own order), with JSON's own string characters."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return json_schema_to_gbnf(json.dumps(schema)).replace(_LOOSE_CHAR, _JSON_CHAR)


#: Free-text fields of an answer (its ``rationale``) are capped in the grammar: a small model otherwise writes on for
#: thousands of tokens (SmolLM2-135M did, several minutes a call on 2 cores). Only the grammar sees the cap; the
#: validator takes any length (the rationale is shown, never used).
TEXT_MAX_CHARS = 400


def _short_texts(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` whose top-level string properties without a length bound get ``maxLength``."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return schema
    capped = {k: ({**v, "maxLength": TEXT_MAX_CHARS} if isinstance(v, dict) and v.get("type") == "string"
                  and "enum" not in v and "maxLength" not in v else v) for k, v in props.items()}
    return {**schema, "properties": capped}


class LlamaCppSettings(ClientSettings):
    """The options of a model in this process, beside every client's."""

    llamacpp_n_ctx: int | None = setting(None, "an integer >= 256", "Context size in tokens of an in-process model "
                                         "(llamacpp; None: the model's own).", ge=256)
    llamacpp_threads: int | None = setting(None, "an integer >= 1", "Threads of an in-process model (llamacpp; None: "
                                           "the usable cores divided by the sweep's worker processes).", ge=1,
                                           resume=True, operational=True)

    def client_options(self) -> ClientOptions:
        return dataclasses.replace(super().client_options(), n_ctx=self.llamacpp_n_ctx, threads=self.llamacpp_threads)


class LlamaCppClient(SDKClient):
    """A GGUF model in this process (see the module doc).

    Args:
        model: Path of the ``.gguf`` file (the part after ``llamacpp:`` in the backend spec).
        options: Retry policy (its ``timeout_s`` bounds the generation of an attempt), sampling, ``n_ctx`` and
            ``threads``.

    Raises:
        BackendConfigError: No file, not a GGUF file, llama-cpp-python missing, or a model llama.cpp cannot load.
    """

    Options: ClassVar[type[ClientSettings]] = LlamaCppSettings
    api: ClassVar[str] = "llama.cpp create_chat_completion"
    provider_name: ClassVar[str] = "llamacpp"
    key_variables: ClassVar[tuple[str, ...]] = ()
    """No key: nothing leaves the process."""
    default_model: ClassVar[str] = ""
    """No default: the spec names a file."""
    description: ClassVar[str] = "a local GGUF model in this process (llamacpp:PATH.gguf; extra: local)"
    requires: ClassVar[str | None] = "llama_cpp"
    """Configured when the extra ``local`` is installed."""
    default_profile: ClassVar[ClientProfile] = PROFILE
    free: ClassVar[bool] = True
    """Local compute: every call costs 0 (no price table entry needed)."""
    local: ClassVar[bool] = True
    takes_seed: ClassVar[bool] = True
    """Each call samples with ``Request.seed`` (a function of the run seed and the call's key)."""
    whole_attempt_deadline: ClassVar[bool] = False
    """The generation checks ``--timeout`` itself at every token (a thread cannot stop llama.cpp from outside)."""

    def __init__(self, model: str, options: ClientOptions) -> None:
        path = check_gguf(model)
        super().__init__(self.provider_name, str(path), options, PROFILE, base_url="in-process", key=None,
                         key_source="none (local model)", key_variable="")
        self._model = load_model(path, options.n_ctx, options.threads or default_threads(), options.progress)
        self._identity = model_identity(self._model)
        self.model = path.name

    # --- what the session and the prompt builder ask --------------------------------------------------------------
    @property
    def cache_identity(self) -> str:
        """The answer cache's model key: the file's sha256, not its path."""
        return f"{self._identity['file']}@sha256:{self._identity['sha256']}"

    @property
    def context_tokens(self) -> int:
        return self._model.n_ctx

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the model's own tokenizer (special tokens parsed, no BOS)."""
        with self._model.lock:
            return len(self._model.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def chat_tokens(self, messages: list[Message]) -> int:
        """Tokens of ``messages`` as the model sees them: rendered by its chat template, then tokenized (within
        ``--timeout``; a template that cannot render them is a :class:`BackendConfigError`)."""
        self.check_chat()
        timeout = self.options.retry.attempt_timeout_s
        with self._model.lock:
            try:
                return len(self._model.format([m.to_dict() for m in messages], time.monotonic() + timeout)[0])
            except TemplateTimeout:
                raise BackendConfigError(chat_refusal(
                    self._model.path.name, f"has a chat template that passed --timeout {timeout:g} s rendering the "
                    "first prompt")) from None
            except TemplateProblem as exc:
                raise BackendConfigError(chat_refusal(
                    self._model.path.name, f"has a chat template that cannot render the first prompt ({exc})")) \
                    from None

    def check_chat(self) -> None:
        """Refuse (:class:`BackendConfigError`, one line with advice) a model that cannot take chat messages: a
        base model without a chat template, or one whose template does not compile. Asked by the backend factory
        for the modes that send chat messages (a mode that reads the model's token probabilities needs none)."""
        if self._model.chat_problem:
            raise BackendConfigError(chat_refusal(self._model.path.name, self._model.chat_problem))

    # --- the provider's part --------------------------------------------------------------------------------------
    def _grammar(self, schema: dict[str, Any] | None, mode: str) -> Any:
        from llama_cpp import LlamaGrammar
        from llama_cpp.llama_grammar import JSON_GBNF

        if mode == "json_schema" and schema is not None:
            capped = _short_texts(schema)
            text = json.dumps(capped, sort_keys=True)  # the cache key; the converter gets the schema's own order,
            if text not in self._model.grammars:  # which is the order of the keys in the answer it allows
                try:
                    gbnf = schema_grammar(capped)
                except Exception as exc:  # the converter raises plain exceptions for what it does not support
                    raise _SchemaRefused(f"llama.cpp cannot turn the json_schema into a grammar: {exc}") from None
                self._model.grammars[text] = LlamaGrammar.from_string(gbnf, verbose=False)
            return self._model.grammars[text]
        if mode == "json_mode":
            if "" not in self._model.grammars:
                self._model.grammars[""] = LlamaGrammar.from_string(JSON_GBNF, verbose=False)
            return self._model.grammars[""]
        return None

    def _send(self, request: Request, mode: str) -> Any:
        from llama_cpp import StoppingCriteriaList

        sampling = self.options.sampling
        temperature = self.temperature_for(request)
        grammar = self._grammar(request.output.json_schema, mode)
        timeout = self.options.retry.attempt_timeout_s
        with self._model.lock:
            deadline = time.monotonic() + timeout  # --timeout covers rendering the chat template and generating
            try:
                prompt, stop, stop_ids = self._model.format([m.to_dict() for m in request.messages], deadline)
            except TemplateTimeout:
                raise _Deadline(f"rendering the chat template passed --timeout {timeout:g} s") from None
            room = self._model.n_ctx - len(prompt)
            if room < 16:
                raise ValueError(f"the prompt ({len(prompt)} tokens) does not fit the model's context of "
                                 f"{self._model.n_ctx} tokens; raise --llamacpp-n-ctx (or lower --max-prompt-tokens)")
            passed: list[bool] = []
            ticker = Ticker(self.options.progress, self.provider, request.key)  # a long generation says how far

            def stop_here(tokens: Any, logits: Any) -> bool:
                ticker.tokens(len(tokens) - len(prompt))
                if time.monotonic() > deadline:
                    passed.append(True)
                    return True
                return bool(stop_ids) and int(tokens[-1]) in stop_ids

            out = self._model.llm.create_completion(
                prompt=prompt,
                grammar=grammar,
                temperature=0.8 if temperature is None else float(temperature),
                seed=request.seed if request.seed is not None else call_seed(0, request.key),
                max_tokens=min(sampling.max_output_tokens, room),
                stop=stop,
                stopping_criteria=StoppingCriteriaList([stop_here]),
            )
        if passed:
            raise _Deadline(f"generation passed --timeout {timeout:g} s")
        return out

    def _read(self, response: Any, mode: str) -> Completion:
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        finish = choice.get("finish_reason")
        return Completion(
            text=choice.get("text") or "",
            input_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", 0)),
            model=self.model,
            finish_reason=finish,
            truncated=finish == "length",
        )

    def _classify_sdk(self, exc: BaseException) -> tuple[FaultKind, float | None] | None:
        # A local model that ran out of time or context fails the same way again: never retried.
        if isinstance(exc, (_Deadline, _SchemaRefused, ValueError, RuntimeError)):
            return "fatal", None
        return None

    def _bad_request_text(self, exc: BaseException) -> str | None:
        return str(exc) if isinstance(exc, _SchemaRefused) else None

    def _describe_extra(self) -> dict[str, Any]:
        return {"local_model": self._identity}
