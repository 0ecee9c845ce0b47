"""The prompt stage: evidence and the current table as text, templates, the message builder."""
