"""The GGUF model of ``llamacpp:PATH.gguf`` in this process: the file checked, loaded once per process, named exactly.

:func:`load_model` keeps one loaded model per file, context size and thread count, shared by every client that
names the same file; its lock serialises the calls (one ``Llama`` object is not thread-safe). :func:`model_identity`
is what ``config.json`` records of it and what the answer cache keys on (the file's sha256, not its path). The
client that asks it is :class:`~llm_policy_gen.clients.llamacpp.LlamaCppClient`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendConfigError, UserError
from ..lm.model_files import is_model_name, resolve_model
from ..storage.model_file import file_sha256, is_gguf, loading
from .chat_template import ChatTemplate, TemplateProblem, compile_template, syntax_error_text

__all__ = ["LocalModel", "load_model", "model_identity", "check_gguf", "chat_refusal", "default_threads",
           "usable_cores"]

#: GGUF ``general.file_type`` -> quantisation name (llama.cpp's ``llama_ftype``).
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
               18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 24: "IQ1_S", 25: "IQ4_NL", 30: "BF16"}
_models_lock = threading.Lock()
_models: dict[tuple[str, int, int], LocalModel] = {}


def check_gguf(path_text: str) -> Path:
    """The path of a readable GGUF file, or :class:`BackendConfigError` (one line) saying what is wrong. A
    ``models:NAME`` (``llamacpp:models:qwen2.5-coder-0.5b``) is ``tools/fetch_model.py NAME``'s file, as for
    ``--lm-model``: a suite names its models so, with no path of one machine."""
    if not path_text.strip():
        raise BackendConfigError("llamacpp needs a model file: --backend llamacpp:PATH/TO/MODEL.gguf "
                                 "(`python tools/fetch_model.py smollm2` fetches a small one)")
    if is_model_name(path_text):
        try:
            path_text = resolve_model(path_text, f"--backend llamacpp:{path_text}")
        except (ValueError, UserError) as exc:
            raise BackendConfigError(str(exc)) from None
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise BackendConfigError(f"llamacpp model file {path} does not exist (--backend llamacpp:PATH.gguf)")
    try:
        gguf = is_gguf(path)
    except OSError as exc:
        raise BackendConfigError(f"cannot read llamacpp model file {path}: {exc.strerror}") from None
    if not gguf:
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


def load_model(path: Path, n_ctx: int | None, n_threads: int, say: Callable[[str], None] | None = None
               ) -> LocalModel:
    """The model at ``path``, loaded once per process for a given context size and thread count; ``say`` hears a
    line before the load and one after it with its seconds (the file's sha256, which names the model, included)."""
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
            with loading(say, "llamacpp", path):
                try:
                    llm = llama_cpp.Llama(model_path=str(path), n_ctx=int(n_ctx or 0), n_threads=n_threads,
                                          n_threads_batch=n_threads, verbose=False)
                except TemplateSyntaxError as exc:  # llama-cpp-python compiles the file's chat templates on load
                    raise BackendConfigError(chat_refusal(
                        path.name, f"has a chat template that does not compile ({syntax_error_text(exc)})")) from None
                except (ValueError, RuntimeError, OSError) as exc:
                    raise BackendConfigError(f"llama.cpp could not load {path}: {exc}") from None
                _quiet_llama_cpp()
                model = _models[key] = LocalModel(path, llm, n_threads)
                file_sha256(path)  # what model_identity names it by: computed once per process, counted here
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
