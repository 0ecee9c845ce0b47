"""The names of settings and of record keys: what the code calls them and what files and command lines wrote
(:mod:`.aliases`, the one mapping between the two)."""
