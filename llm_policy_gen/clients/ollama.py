"""Ollama's OpenAI-compatible endpoint: the OpenAI client with Ollama's facts (no key, its own base-URL variable and
default, always a local server). A provider that speaks an existing wire protocol is this much code."""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import urlsplit

from .openai import OpenAIClient, server_answers
from .profiles import ClientProfile

__all__ = ["OLLAMA_BASE_URL", "OllamaClient"]

#: Ollama's OpenAI-compatible endpoint on the local machine.
OLLAMA_BASE_URL = "http://localhost:11434/v1"


class OllamaClient(OpenAIClient):
    """A model served by Ollama: base URL from ``--base-url``, else ``OLLAMA_BASE_URL``, else
    ``http://localhost:11434/v1`` (a URL without a path gets ``/v1``); no key; ``max_tokens``; a local server (the
    local retry defaults and concurrency, wherever it runs)."""

    provider_name: ClassVar[str] = "ollama"
    description: ClassVar[str] = "local Ollama server (OpenAI-compatible API)"
    default_model: ClassVar[str] = "llama3.1:8b"
    key_variables: ClassVar[tuple[str, ...]] = ()
    base_url_variable: ClassVar[str | None] = "OLLAMA_BASE_URL"
    auto_order: ClassVar[int | None] = None
    default_base_url: ClassVar[str] = OLLAMA_BASE_URL
    placeholder_key: ClassVar[str] = "ollama"
    local: ClassVar[bool] = True
    default_profile: ClassVar[ClientProfile] = ClientProfile("ollama", "Ollama", (0.0, 2.0), "max_tokens")
    compatible_profile: ClassVar[ClientProfile | None] = None

    @classmethod
    def base_url_for(cls, explicit: str | None) -> str:
        url = super().base_url_for(explicit)
        return url.rstrip("/") + "/v1" if urlsplit(url).path in ("", "/") else url

    @classmethod
    def configured(cls, check_server: bool = False) -> bool | None:
        """Ollama needs no key but its server: asked with ``check_server`` (True or False), else None (not checked)."""
        return server_answers(cls.base_url_for(None)) if check_server else None
