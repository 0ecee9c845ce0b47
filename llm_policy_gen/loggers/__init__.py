"""What a run prints and logs: the console, and the per-iteration writers of ``--log``."""
