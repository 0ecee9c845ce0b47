"""The bench scripts' process pools, alike: their workers end with the script however it ends (``kill -9``
included), as the product's sweep workers do (:func:`llm_policy_gen.storage.locks.die_with_parent`). A worker left
behind would go on training, holding its run's lock against the next invocation of the script."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def worker_pool(workers: int, **kwargs: Any) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes that die with this one; ``kwargs`` go to :class:`ProcessPoolExecutor`."""
    from llm_policy_gen.storage.locks import die_with_parent

    return ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),), **kwargs)
