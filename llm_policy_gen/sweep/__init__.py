"""Sweeps: every (backend, seed) run of a comparison, and the files it leaves.

One concept a module, in the order a sweep uses them:

* :mod:`.plan` -- the grid of tasks, what earlier invocations left, the checks before the first run;
* :mod:`.task` -- one run of the grid (started or resumed) and its result;
* :mod:`.limits` -- provider limits and the budget, shared by every run;
* :mod:`.local` and :mod:`.ray` (with :mod:`.sync`, its directory sync) -- the executors;
* :mod:`.results` -- typed rows, curves and the sweep's record, read and written (``results.csv``, ``curves.json``,
  ``compare.json``, ``results.md``); reports and the paper read a comparison through it alone;
* :mod:`.figures` -- ``curves.png``;
* :mod:`.compare` -- the ``compare`` command and :func:`~.compare.run_compare` over a :class:`~.compare.CompareConfig`.

Nothing is imported here, so that reading results never loads the orchestrator.
"""
