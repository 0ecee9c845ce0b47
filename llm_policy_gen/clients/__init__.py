"""LLM transports: one :class:`~llm_policy_gen.clients.base.LLMClient` per provider, plus ``replay:PATH``.

``base`` holds the contract (request, completion, retry policy); ``common`` the SDK clients' shared half (a
provider's facts as class variables, structured-output fallback, whole-attempt deadline); ``keys`` where keys come
from and how they are kept out of every output; ``openai``, ``anthropic`` and ``gemini`` speak each provider's API
through its official SDK, ``ollama`` is the OpenAI client with Ollama's facts, and ``llamacpp`` runs a GGUF model in
this process; ``replay`` answers from a recorded ``transcripts.jsonl``; ``cache`` is the on-disk answer cache the
session keeps in front of a client. Which client a backend spec names is decided in :mod:`llm_policy_gen.backends`.
"""
