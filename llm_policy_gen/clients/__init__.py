"""LLM transports: one :class:`~llm_policy_gen.clients.base.LLMClient` per provider, plus ``replay:PATH``.

``base`` holds the contract (request, completion, retry policy); ``keys`` where keys come from and how they are kept
out of every output; ``openai``, ``anthropic`` and ``gemini`` speak each provider's API through its official SDK;
``replay`` answers from a recorded ``transcripts.jsonl``; ``cache`` is the on-disk answer cache the session keeps in
front of a client. Which client a backend spec names is decided in :mod:`llm_policy_gen.backends`.
"""
