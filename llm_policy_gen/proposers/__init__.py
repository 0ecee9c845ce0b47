"""Proposers: what answers a prompt context with K candidates.

``llm`` (a language model through the run's session), and the non-LLM searches ``offline`` (the default without a
key, the baseline every LLM must beat), ``q-learning`` and ``random``. Which backend spec names which proposer is
decided in :mod:`llm_policy_gen.backends`.
"""
