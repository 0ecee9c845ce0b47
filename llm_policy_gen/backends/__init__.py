"""Backends from ``provider[:model]`` strings.

``offline`` and ``replay:PATH`` are built in; the SDK backends (``gemini``, ``openai``, ``anthropic``, ``ollama`` and
other OpenAI-compatible servers) are imported lazily so that a missing SDK only matters when it is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BackendConfigError
from .base import Backend, Completion, Message, OutputFormat, RetryPolicy, Sampling
from .keys import BASE_URL_VARIABLES, get_key, key_variable

__all__ = [
    "Backend",
    "Completion",
    "Message",
    "OutputFormat",
    "RetryPolicy",
    "Sampling",
    "BackendOptions",
    "BackendInfo",
    "BACKENDS",
    "make_backend",
    "parse_backend_spec",
    "default_backend_spec",
    "list_backends",
]


@dataclass(frozen=True)
class BackendInfo:
    """One row of ``llm-policy-gen backends``."""

    name: str
    default_model: str
    is_llm: bool
    description: str


#: Every backend name the spec parser accepts, with its default model.
BACKENDS: dict[str, BackendInfo] = {
    "offline": BackendInfo(
        "offline", "", False, "deterministic non-LLM optimiser; the baseline every LLM must beat"
    ),
    "replay": BackendInfo("replay", "", False, "replays the response_text lines of a transcripts.jsonl file"),
    "gemini": BackendInfo("gemini", "gemini-3.8-flash", True, "Google Gemini through google-genai"),
    "openai": BackendInfo("openai", "gpt-6.2-sol", True, "OpenAI or any OpenAI-compatible server (--base-url)"),
    "anthropic": BackendInfo("anthropic", "claude-sonnet-5-5", True, "Anthropic Claude through anthropic"),
    "ollama": BackendInfo("ollama", "llama3.1:8b", True, "local Ollama server (OpenAI-compatible API)"),
    "q-learning": BackendInfo(
        "q-learning", "", False, "classic tabular Q-learning on the same discretization (baseline, not an LLM)"
    ),
    "random": BackendInfo("random", "", False, "a uniformly random table each iteration (baseline, not an LLM)"),
}

#: Order in which ``train`` without ``--backend`` looks for a configured provider.
AUTO_ORDER = ("gemini", "openai", "anthropic")


@dataclass(frozen=True)
class BackendOptions:
    """Settings shared by every backend."""

    base_url: str | None = None
    """Overrides the provider's base URL (also read from the SDK's own variable)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sampling: Sampling = field(default_factory=Sampling)
    cache_dir: Path | None = None
    """Where answers are cached; None disables the cache."""
    seed: int = 0
    """Seed of deterministic backends (offline)."""


def parse_backend_spec(spec: str) -> tuple[str, str]:
    """``"openai:gpt-4.1"`` -> ``("openai", "gpt-4.1")``; ``"replay:PATH"`` keeps the path as the model part."""
    if not isinstance(spec, str) or not spec.strip():
        raise BackendConfigError(f"empty backend spec; accepted: {', '.join(BACKENDS)} (as NAME or NAME:MODEL)")
    name, _, model = spec.strip().partition(":")
    name = name.lower()
    if name not in BACKENDS:
        raise BackendConfigError(
            f"unknown backend {name!r} in {spec!r}; accepted: {', '.join(BACKENDS)} (as NAME or NAME:MODEL)"
        )
    if name == "replay" and not model:
        raise BackendConfigError("replay needs a file: --backend replay:PATH/TO/transcripts.jsonl")
    if name in ("offline", "q-learning", "random") and model:
        raise BackendConfigError(f"offline takes no model, got {spec!r}")
    return name, model or BACKENDS[name].default_model


def is_configured(name: str) -> bool:
    """True when ``name`` can be used as it is (a key is set, or it needs none)."""
    if name in ("offline", "replay", "ollama", "q-learning", "random"):
        return True
    return get_key(name) is not None


def default_backend_spec() -> tuple[str, str]:
    """The backend ``train`` uses without ``--backend``, and why."""
    for name in AUTO_ORDER:
        if is_configured(name):
            return name, f"{key_variable(name)} is set"
    return "offline", "no API key is configured (set GEMINI_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY)"


def list_backends() -> list[dict[str, Any]]:
    """Rows for ``llm-policy-gen backends``: name, default model, LLM or not, configured or not (never a key)."""
    rows = []
    for info in BACKENDS.values():
        base_var = BASE_URL_VARIABLES.get(info.name)
        rows.append(
            {
                "name": info.name,
                "default_model": info.default_model,
                "is_llm": info.is_llm,
                "configured": is_configured(info.name),
                "key_variable": key_variable(info.name),
                "base_url": os.environ.get(base_var, "") if base_var else "",
                "description": info.description,
            }
        )
    return rows


def make_backend(spec: str, options: BackendOptions | None = None) -> Backend:
    """Build the backend named by ``spec``."""
    options = options or BackendOptions()
    name, model = parse_backend_spec(spec)
    backend: Backend
    if name == "offline":
        from .offline import OfflineBackend

        return OfflineBackend(seed=options.seed)
    if name == "replay":
        from .replay import ReplayBackend

        return ReplayBackend(model)
    if name in ("q-learning", "random"):
        from .baselines import make_baseline

        return make_baseline(name, seed=options.seed)
    if name in ("openai", "ollama"):
        from .openai_backend import OpenAIBackend

        backend = OpenAIBackend(model, options, provider=name)
    elif name == "anthropic":
        from .anthropic_backend import AnthropicBackend

        backend = AnthropicBackend(model, options)
    elif name == "gemini":
        from .gemini_backend import GeminiBackend

        backend = GeminiBackend(model, options)
    else:  # pragma: no cover - parse_backend_spec rejects it
        raise BackendConfigError(f"unknown backend {name!r}")
    if options.cache_dir is not None:
        from .cache import CachingBackend

        backend = CachingBackend(backend, options.cache_dir, options.sampling)
    return backend
