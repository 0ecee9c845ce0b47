"""Backends from ``name[:model]`` strings: a registry of LLM clients and non-LLM proposers.

A backend is either an **LLM client** (``gemini``, ``openai``, ``anthropic``, ``ollama``, and ``replay:PATH``), which
the engine wraps in a session and an :class:`~llm_policy_gen.proposers.llm.LLMProposer`, or a **proposer** that is not
a language model (``offline``, ``q-learning``, ``random``). Each is one registry line with its entry point, loaded
lazily, so a missing SDK matters only when it is used, and a misspelt name gets the close matches.
"""

from __future__ import annotations

import os
from typing import Any

from .clients.keys import BASE_URL_VARIABLES, get_key, key_variable
from .errors import BackendConfigError
from .registry import Registry

__all__ = ["BACKENDS", "AUTO_ORDER", "parse_backend_spec", "is_configured", "default_backend_spec", "list_backends",
           "is_client", "NON_LLM"]

#: Every backend: entry point plus ``kind`` ("client" or "proposer"), ``default_model``, ``is_llm``, ``description``.
BACKENDS: Registry[Any] = Registry("backend", "--backend")
BACKENDS.register("offline", "llm_policy_gen.proposers.offline:OfflineProposer", kind="proposer", default_model="",
                  is_llm=False, description="deterministic non-LLM optimiser; the baseline every LLM must beat")
BACKENDS.register("replay", "llm_policy_gen.clients.replay:ReplayClient", kind="client", default_model="",
                  is_llm=False, description="answers each call with the recorded answer of a transcripts.jsonl")
BACKENDS.register("gemini", "llm_policy_gen.clients.gemini:GeminiClient", kind="client",
                  default_model="gemini-3.8-flash", is_llm=True, description="Google Gemini through google-genai")
BACKENDS.register("openai", "llm_policy_gen.clients.openai:OpenAIClient", kind="client", default_model="gpt-6.2-sol",
                  is_llm=True, provider="openai", description="OpenAI or any OpenAI-compatible server (--base-url)")
BACKENDS.register("anthropic", "llm_policy_gen.clients.anthropic:AnthropicClient", kind="client",
                  default_model="claude-sonnet-5-5", is_llm=True, description="Anthropic Claude through anthropic")
BACKENDS.register("ollama", "llm_policy_gen.clients.openai:OpenAIClient", kind="client", default_model="llama3.1:8b",
                  is_llm=True, provider="ollama", description="local Ollama server (OpenAI-compatible API)")
BACKENDS.register("llamacpp", "llm_policy_gen.clients.llamacpp:LlamaCppClient", kind="client", default_model="",
                  is_llm=True, requires="llama_cpp",
                  description="a local GGUF model in this process (llamacpp:PATH.gguf; extra: local)")
BACKENDS.register("q-learning", "llm_policy_gen.proposers.qlearning:QLearningProposer", kind="proposer",
                  default_model="", is_llm=False,
                  description="classic tabular Q-learning on the same discretization (baseline, not an LLM)")
BACKENDS.register("random", "llm_policy_gen.proposers.random:RandomProposer", kind="proposer", default_model="",
                  is_llm=False, description="uniformly random tables (baseline, not an LLM)")

#: Order in which ``train`` without ``--backend`` looks for a configured provider.
AUTO_ORDER = ("gemini", "openai", "anthropic")
#: Backends that are not language models and take no model.
NON_LLM = ("offline", "q-learning", "random")


def parse_backend_spec(spec: str) -> tuple[str, str]:
    """``"openai:gpt-4.1"`` -> ``("openai", "gpt-4.1")``; ``"replay:PATH"`` keeps the path as the model part."""
    accepted = f"{', '.join(BACKENDS.names())} (as NAME or NAME:MODEL)"
    if not isinstance(spec, str) or not spec.strip():
        raise BackendConfigError(f"empty backend spec; accepted: {accepted}")
    name, _, model = spec.strip().partition(":")
    name = name.lower()
    if name not in BACKENDS:
        err = BACKENDS.unknown(name)
        raise BackendConfigError(str(err) if name == spec.strip().lower() else f"{err}; the spec was {spec!r}")
    if name == "replay" and not model:
        raise BackendConfigError("replay needs a file: --backend replay:PATH/TO/transcripts.jsonl")
    if name in NON_LLM and model:
        raise BackendConfigError(f"{name} takes no model, got {spec!r}")
    return name, model or str(BACKENDS.entry(name).info["default_model"])


def is_client(name: str) -> bool:
    """True for backends that are LLM clients (and replay), False for the non-LLM proposers."""
    return BACKENDS.entry(name).info["kind"] == "client"


def is_configured(name: str, check_server: bool = False) -> bool | None:
    """True when ``name`` can be used as it is (a key is set, or it needs none).

    ``ollama`` needs its server: with ``check_server`` it is asked (True or False), otherwise None (not checked).
    """
    if name == "ollama":
        if not check_server:
            return None
        from .clients.openai import ollama_base_url, server_answers

        return server_answers(ollama_base_url(None))
    info = BACKENDS.entry(name).info
    if not info["is_llm"]:
        return True
    if "requires" in info:  # a local runtime: configured when it is installed (it needs no key)
        import importlib.util

        return importlib.util.find_spec(info["requires"]) is not None
    return get_key(name) is not None


def default_backend_spec() -> tuple[str, str]:
    """The backend ``train`` uses without ``--backend``, and why."""
    for name in AUTO_ORDER:
        if is_configured(name):
            return name, f"{key_variable(name)} is set"
    return "offline", "no API key is configured (set GEMINI_API_KEY, OPENAI_API_KEY or ANTHROPIC_API_KEY)"


def list_backends(check_servers: bool = False) -> list[dict[str, Any]]:
    """Rows for ``llm-policy-gen backends``: name, default model, LLM or not, configured or not (never a key)."""
    rows = []
    for name in BACKENDS:
        info = BACKENDS.entry(name).info
        base_var = BASE_URL_VARIABLES.get(name)
        rows.append({
            "name": name,
            "default_model": info["default_model"],
            "is_llm": info["is_llm"],
            "configured": is_configured(name, check_servers),
            "key_variable": key_variable(name),
            "base_url": os.environ.get(base_var, "") if base_var else "",
            "description": info["description"],
        })
    return rows
