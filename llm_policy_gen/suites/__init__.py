"""Benchmark suites run by the product (``llm-policy-gen bench SUITE``).

A suite is data (:mod:`.definition`: ``data/SUITE.toml``): tasks with their goals and budgets, methods in the
comparison grammar of :mod:`llm_policy_gen.sweep.methods` with the budget each gets, and seeds. Its cells (one per
task, method and seed) are runs of the product, run through the sweep's executors; each finished run becomes one
record of the suite's store (:mod:`.store`), and every published figure is rendered from committed records.
"""
