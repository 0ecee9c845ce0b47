"""Sweeps: every (backend, seed) run of a comparison, and the files it leaves.

One concept a module, in the order a sweep uses them:

* :mod:`.plan` -- the grid of tasks, what earlier invocations left, the checks before the first run;
* :mod:`.task` -- one run of the grid (started or resumed) and its result;
* :mod:`.limits` -- provider limits and the budget, shared by every run;
* :mod:`.executors` -- ``--executor`` to the module that runs the tasks: :mod:`.local` or :mod:`.ray` (with
  :mod:`.sync`, its directory sync);
* :mod:`.results` -- typed rows, curves and the sweep's record, read and written (``results.csv``, ``curves.json``,
  ``compare.json``, ``results.md``); reports and the paper read a comparison through it alone;
* :mod:`.figures` -- ``curves.png``;
* :mod:`.closing` -- the files a sweep leaves at its end (the random policy's zero, the table, the curves);

:mod:`llm_policy_gen.commands.compare` is the ``compare`` command: its
:func:`~llm_policy_gen.commands.compare.run_compare` calls them in that order.

Nothing is imported here, so that reading results never loads the orchestrator.
"""
