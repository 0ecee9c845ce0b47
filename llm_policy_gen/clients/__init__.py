"""LLM transports: one :class:`~llm_policy_gen.clients.base.LLMClient` per provider, plus ``replay:PATH``, and the
session every model call of a run goes through.

The transports: ``base`` holds the contract (request, completion, client options) and ``retry`` the one retry
policy; ``sdk`` the SDK clients' shared base (a provider's facts as class variables, the retry loop around each
attempt), with ``faults`` (the faults every SDK shares, sorted into fault kinds), ``deadline`` (the whole-attempt
deadline) and ``structured`` (structured output and its fallback); ``keys`` where keys come from and how they are
kept out of every output; ``profiles`` a provider's quirks; ``openai``, ``anthropic`` and ``gemini`` speak each
provider's API through its official SDK, ``ollama`` is the OpenAI client with Ollama's facts, and ``llamacpp`` runs a
GGUF model in this process; ``replay`` answers from a recorded ``transcripts.jsonl``. Which client a backend spec
names is decided in :mod:`llm_policy_gen.backends`.

The call layer: ``session`` (:class:`~llm_policy_gen.clients.session.LLMSession`: candidates, repairs, budget, cost,
the answer cache and the transcript), ``usage`` (calls, tokens and cost; the budget; the limit on calls in flight),
``transcript`` (``transcripts.jsonl`` written, and read back on a resume) and ``cache`` (the on-disk answer cache the
session keeps in front of a client).
"""
