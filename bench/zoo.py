"""The RL Baselines3 Zoo's tuned hyperparameters: the package's reader (:mod:`llm_policy_gen.peers.zoo`), which
``train --mode peer`` uses too, under the name the bench scripts import."""

from llm_policy_gen.peers.zoo import (  # noqa: F401
    ALGO_FILES,
    SCHEDULED,
    UNSUPPORTED,
    Hyper,
    ZooError,
    benchmark_reference,
    find_benchmark_row,
    find_entry,
    hyperparameters,
    package_dir,
    parse_kwargs,
    read_file,
    zoo_version,
)
