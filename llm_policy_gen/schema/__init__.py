"""The names of settings and of record keys: what the code calls them and what files and command lines wrote
(:mod:`.aliases`, the one mapping between the two), and how a command line's text becomes a setting's value
(:mod:`.argtypes`, which the commands and a comparison's method entries share)."""
