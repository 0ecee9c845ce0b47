"""The model a resumed lm-policy run loaded, checked against the one it is given (issue 59, item 3).

``config.json`` records the model's path (absolute since round 5) and sha256. A resume may name the same model at
another path (a run moved to another machine), never another model: other weights would go on from a state they
never made. A run keeps the name of the model it started with.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import UserError

__all__ = ["recorded_path", "check_resumed_path", "check_same_model"]


def recorded_path(record: dict[str, Any]) -> str | None:
    """The model path the run's settings record (absolute, or ``models:NAME`` as written; None: the run named no
    model)."""
    settings = record.get("config")
    was = settings.get("lm_model") if isinstance(settings, dict) else None
    if isinstance(was, str) and was.startswith("models:"):
        return was
    return os.path.abspath(os.path.expanduser(was)) if isinstance(was, str) and was else None


def _recorded_sha256(record: dict[str, Any]) -> str | None:
    """The sha256 of the model a run loaded, as its config.json records it (None: it loaded none)."""
    facts = record.get("lm_model")
    sha = facts.get("sha256") if isinstance(facts, dict) else None
    return sha if isinstance(sha, str) and sha else None


def check_resumed_path(record: dict[str, Any], given: str | None) -> None:
    """A resume may name the run's model at another path only where config.json records the model's sha256 to check
    it against (a run that loaded no model records none)."""
    was = recorded_path(record)
    if given != was and _recorded_sha256(record) is None:
        raise UserError(f"--lm-model cannot change on resume: the run was made with {was or 'no --lm-model'} and "
                        "its config.json records no model's sha256 to check another path against; start a new run")


def check_same_model(record: dict[str, Any], path: str) -> None:
    """The model at ``path`` is the one the resumed run loaded (the sha256 its config.json records), or the resume
    is refused before the model is read: other weights would go on from a state they never made."""
    from .backbone import model_identity

    was = _recorded_sha256(record)
    if was is None:
        return
    try:
        now = model_identity(path).sha256  # hashed once per process: the load that follows reuses it
    except UserError as exc:  # the model is gone from its path (a run moved to another machine)
        raise UserError(f"{exc}; to resume, give --lm-model PATH of the model this run was made with (sha256 "
                        f"{was[:16]}...)") from None
    if now != was:
        facts = record.get("lm_model")
        named = facts.get("path") if isinstance(facts, dict) else None
        raise UserError(f"--lm-model {path} is not the model this run was made with (sha256 {now[:16]}..., the run's "
                        f"config.json records {was[:16]}... for {named or 'its model'}); resume with --lm-model PATH "
                        "of that model, or start a new run")
