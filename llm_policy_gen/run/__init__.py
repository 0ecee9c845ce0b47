"""One run: its services, records, driver and resume (being moved here from ``engine.py``)."""
