"""Files this package reads and writes safely: locks, atomic writes, bounded JSON, config files, model files."""
