"""Figures: every drawing of the package, with matplotlib's object API.

* :mod:`.figure` -- what every drawing is made and saved with: :data:`~.figure.plt` (figures on their own Agg
  canvas; no pyplot, no backend chosen, so a notebook that imports the package keeps its own) and
  :func:`~.figure.save_figure` (atomic);
* :mod:`.curves` -- the curves of runs from their ``events.jsonl`` (a run's ``training.png`` and ``testing.png``);
* :mod:`.stats` -- the statistics figures and tables show (interquartile means with bootstrap intervals, bands);
* :mod:`.table` -- a run's best table (heat maps, a grid world's arrows, or a state x action image);
* :mod:`.command` -- the ``plot`` command.

Nothing is imported here, so that the command line does not load matplotlib until it draws.
"""
