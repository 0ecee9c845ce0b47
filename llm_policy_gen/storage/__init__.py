"""Files this package reads and writes safely: locks, atomic writes, bounded JSON, config files, model files, the
prompt templates (:mod:`.templates`), and the secrets kept out of all of them (:mod:`.secrets`)."""
