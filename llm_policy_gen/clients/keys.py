"""API keys: where they come from, and how they are kept out of every log.

Keys are read only from the process environment, which :func:`load_env` fills from a ``.env`` file (python-dotenv,
never overriding variables already set). A key is never a command-line option, never written to config.json,
transcripts or error messages: :func:`redact` removes every known key value from a text.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["KEY_VARIABLES", "BASE_URL_VARIABLES", "load_env", "get_key", "key_variable", "redact", "known_keys"]

#: Provider -> environment variables holding its key, in order of preference.
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "ollama": (),
}

#: Provider -> the SDK's own base-URL variable (honoured as well as ``--base-url``).
BASE_URL_VARIABLES: dict[str, str] = {
    "gemini": "GOOGLE_GEMINI_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
    "ollama": "OLLAMA_BASE_URL",
}


def load_env(path: str | os.PathLike[str] | None = None) -> bool:
    """Load ``.env`` (from ``path`` or the current folder upwards) without overriding set variables.

    ``LLM_POLICY_GEN_NO_DOTENV=1`` disables it (the test suite sets it so that a developer's keys are never used).
    """
    from dotenv import find_dotenv, load_dotenv

    if os.environ.get("LLM_POLICY_GEN_NO_DOTENV") == "1":
        return False
    target = str(path) if path is not None else find_dotenv(usecwd=True)
    if not target or not Path(target).is_file():
        return False
    return bool(load_dotenv(target, override=False))


def key_variable(provider: str) -> str:
    """The variable a user should set for ``provider`` (first choice)."""
    names = KEY_VARIABLES.get(provider, ())
    return names[0] if names else ""


def get_key(provider: str) -> str | None:
    """The configured key for ``provider``, or None."""
    for name in KEY_VARIABLES.get(provider, ()):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def known_keys() -> list[str]:
    """Every key value currently set in the environment (for redaction)."""
    values = []
    for names in KEY_VARIABLES.values():
        for name in names:
            v = os.environ.get(name, "").strip()
            if len(v) >= 4:
                values.append(v)
    return values


def redact(text: str, extra: list[str] | None = None) -> str:
    """Replace every known key value in ``text`` with ``[REDACTED]``."""
    for value in sorted(set(known_keys() + (extra or [])), key=len, reverse=True):
        if value:
            text = text.replace(value, "[REDACTED]")
    return text
