"""``llamacpp:PATH.gguf``: a local GGUF model run in this process by llama.cpp (``pip install -e '.[local]'``).

No server, no key, no network, cost 0. The model is loaded once per process (:func:`load_model`, keyed by the file,
the context size and the thread count) and shared by every client that names the same file; one ``Llama`` object is
not thread-safe, so calls are serialised by a lock per model, and the K candidates of an iteration queue behind each
other (each still a distinct sample: its seed is a function of the run seed and the call's key,
:func:`~.base.call_seed`).

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
* **Context**: the model's training context (``n_ctx_train``) unless ``--n-ctx`` is given. The answer's token cap
  is what the context leaves after the prompt (at most ``--max-output-tokens``). A context that cannot hold the first
  prompt's fixed part and as much again for an answer is refused before the run starts, naming the smallest
  ``--n-ctx`` that does (:func:`~llm_policy_gen.backends.factory.check_context`, through
  :meth:`LlamaCppClient.chat_tokens`).
* **Tokens** are counted by the model's tokenizer (:meth:`LlamaCppClient.count_tokens`, which the prompt builder
  uses for ``--max-prompt-tokens``).
* **Threads**: ``--llm-threads``, else the usable cores (``os.sched_getaffinity``) divided by the processes that
  share them (``LLM_POLICY_GEN_PROCESSES``, which a sweep with ``--workers N`` sets to N).
* **Timeout**: ``--timeout`` bounds one attempt from the moment it has the model: rendering the chat template and
  generating (checked at every token; prompt evaluation itself cannot be interrupted). A call that passes it fails
  with a timeout (0 tokens, no text) and is not retried: the same prompt on the same machine would take as long again.
* **Identity**: :meth:`describe` records the file's sha256, size, quantisation, context, chat template and the
  llama-cpp-python version in ``config.json``; the answer cache keys on the sha256, not the path
  (:attr:`cache_identity`), so a moved or renamed file keeps its cached answers and another file with the same name
  does not get them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..errors import BackendConfigError
from ..registry import setting
from .base import ClientOptions, ClientSettings, Completion, Message, Request, call_seed
from .chat_template import ChatTemplate, TemplateProblem, TemplateTimeout, compile_template, syntax_error_text
from .profiles import ClientProfile
from .retry import FaultKind
from .sdk import SDKClient

__all__ = ["LlamaCppClient", "LlamaCppSettings", "LocalModel", "load_model", "model_identity", "PROFILE"]

#: What the in-process runtime accepts: llama.cpp samples at any temperature >= 0 (0 is greedy).
PROFILE = ClientProfile("llamacpp", "llama.cpp (in process)", (0.0, 5.0), "max_tokens")

#: GGUF ``general.file_type`` -> quantisation name (llama.cpp's ``llama_ftype``).
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
               18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 24: "IQ1_S", 25: "IQ4_NL", 30: "BF16"}
_GGUF_MAGIC = b"GGUF"
_hash_lock = threading.Lock()
_hashes: dict[tuple[str, int, int], str] = {}
_models_lock = threading.Lock()
_models: dict[tuple[str, int, int], LocalModel] = {}


class _Deadline(Exception):
    """The attempt passed ``--timeout`` while generating."""


class _SchemaRefused(Exception):
    """llama.cpp's converter could not turn the answer's schema into a grammar."""


def file_sha256(path: Path) -> str:
    """The file's sha256 (computed once per process for a given path, size and modification time)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _hash_lock:
        if key in _hashes:
            return _hashes[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    with _hash_lock:
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def check_gguf(path_text: str) -> Path:
    """The path of a readable GGUF file, or :class:`BackendConfigError` (one line) saying what is wrong."""
    if not path_text.strip():
        raise BackendConfigError("llamacpp needs a model file: --backend llamacpp:PATH/TO/MODEL.gguf "
                                 "(`python tools/fetch_model.py smollm2` fetches a small one)")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise BackendConfigError(f"llamacpp model file {path} does not exist (--backend llamacpp:PATH.gguf)")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BackendConfigError(f"cannot read llamacpp model file {path}: {exc.strerror}") from None
    if magic != _GGUF_MAGIC:
        raise BackendConfigError(f"{path} is not a GGUF model file (it does not start with 'GGUF')")
    return path


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """The usable cores divided by the processes sharing them (``LLM_POLICY_GEN_PROCESSES``), at least 1."""
    try:
        processes = max(1, int(os.environ.get("LLM_POLICY_GEN_PROCESSES", "1")))
    except ValueError:
        processes = 1
    return max(1, usable_cores() // processes)


@dataclass
class LocalModel:
    """One loaded model and the lock that serialises its calls."""

    path: Path
    llm: Any
    n_threads: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    grammars: dict[str, Any] = field(default_factory=dict)
    chat: ChatTemplate | None = None
    chat_problem: str | None = None
    """Why the model cannot take chat messages (no chat template, or one that does not compile), else None."""
    stop_ids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        eos, bos = self.llm.token_eos(), self.llm.token_bos()
        self.stop_ids = {eos} if eos != -1 else set()
        if not self.template:
            self.chat_problem = "has no chat template (tokenizer.chat_template): it is a base model"
            return
        model = self.llm._model  # the token texts the template uses for bos/eos, as llama-cpp-python reads them
        try:
            self.chat = compile_template(self.template, bos_token=model.token_get_text(bos) if bos != -1 else "",
                                         eos_token=model.token_get_text(eos) if eos != -1 else "")
        except TemplateProblem as exc:
            self.chat_problem = f"has a chat template that does not compile ({exc})"

    @property
    def n_ctx(self) -> int:
        return int(self.llm.n_ctx())

    @property
    def template(self) -> str:
        return str((self.llm.metadata or {}).get("tokenizer.chat_template", ""))

    def format(self, messages: list[dict[str, str]], deadline: float) -> tuple[list[int], list[str], set[int]]:
        """The prompt's tokens by the model's own chat template (rendered under the limits of
        :mod:`.chat_template`, :class:`TemplateTimeout` past ``deadline``), its stop strings and stop tokens."""
        if self.chat is None:
            raise TemplateProblem(f"{self.path.name} {self.chat_problem}")
        prompt = self.chat.render(messages, deadline)
        # the template writes the special tokens itself (llama-cpp-python's ``added_special``): no BOS added here
        tokens = self.llm.tokenize(prompt.text.encode("utf-8"), add_bos=False, special=True)
        return list(tokens), prompt.stop, self.stop_ids


def chat_refusal(name: str, problem: str) -> str:
    """The one line that refuses a model that cannot take chat messages, with what to do instead."""
    return (f"llamacpp model {name} {problem}; the modes that ask a model send chat messages, so give an "
            "instruction-tuned GGUF with a working chat template (`python tools/fetch_model.py smollm2` fetches one)")


def load_model(path: Path, n_ctx: int | None, n_threads: int) -> LocalModel:
    """The model at ``path``, loaded once per process for a given context size and thread count."""
    try:
        import llama_cpp
    except ImportError:
        raise BackendConfigError("llamacpp needs llama-cpp-python: pip install -e '.[local]' "
                                 "(it compiles llama.cpp: 10-15 minutes on 2 cores)") from None
    from jinja2 import TemplateSyntaxError

    key = (str(path.resolve()), int(n_ctx or 0), n_threads)
    with _models_lock:
        model = _models.get(key)
        if model is None:
            try:
                llm = llama_cpp.Llama(model_path=str(path), n_ctx=int(n_ctx or 0), n_threads=n_threads,
                                      n_threads_batch=n_threads, verbose=False)
            except TemplateSyntaxError as exc:  # llama-cpp-python compiles the file's chat templates as it loads
                raise BackendConfigError(chat_refusal(
                    path.name, f"has a chat template that does not compile ({syntax_error_text(exc)})")) from None
            except (ValueError, RuntimeError, OSError) as exc:
                raise BackendConfigError(f"llama.cpp could not load {path}: {exc}") from None
            _quiet_llama_cpp()
            model = _models[key] = LocalModel(path, llm, n_threads)
    return model


def _quiet_llama_cpp() -> None:
    """Keep llama.cpp's log lines (warnings and errors of the C library, which ``verbose=False`` still prints) off
    the console: the errors that matter reach the user as this package's own messages."""
    import logging

    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL + 1)


def model_identity(model: LocalModel) -> dict[str, Any]:
    """What names the model exactly: file, sha256, size, quantisation, context, chat template, runtime version."""
    import llama_cpp

    meta = dict(model.llm.metadata or {})
    template = meta.get("tokenizer.chat_template", "")
    arch = meta.get("general.architecture", "")
    try:
        file_type: int | None = int(meta.get("general.file_type", ""))
    except ValueError:
        file_type = None
    return {
        "file": model.path.name,
        "sha256": file_sha256(model.path),
        "size_bytes": model.path.stat().st_size,
        "name": meta.get("general.name", ""),
        "architecture": arch,
        "size_label": meta.get("general.size_label", ""),
        "quantisation": _FILE_TYPES.get(file_type, f"file_type {file_type}") if file_type is not None else "",
        "context_train": int(meta.get(f"{arch}.context_length", 0) or 0),
        "context": model.n_ctx,
        "chat_template": "tokenizer.chat_template (the model's own)" if template else "",
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else "",
        "threads": model.n_threads,
        "runtime": f"llama-cpp-python {llama_cpp.__version__}",
    }


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

    n_ctx: int | None = setting(None, "an integer >= 256", "Context size in tokens of an in-process model "
                                "(llamacpp; None: the model's own).", ge=256)
    llm_threads: int | None = setting(None, "an integer >= 1", "Threads of an in-process model (llamacpp; None: "
                                      "the usable cores divided by the sweep's worker processes).", ge=1, resume=True,
                                      operational=True)

    def client_options(self) -> ClientOptions:
        return dataclasses.replace(super().client_options(), n_ctx=self.n_ctx, threads=self.llm_threads)


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
        self._model = load_model(path, options.n_ctx, options.threads or default_threads())
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
                                 f"{self._model.n_ctx} tokens; raise --n-ctx (or lower --max-prompt-tokens)")
            passed: list[bool] = []

            def stop_here(tokens: Any, logits: Any) -> bool:
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
