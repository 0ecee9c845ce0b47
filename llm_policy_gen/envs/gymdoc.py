"""Task text from a gymnasium environment's own docstring, for environments without a shipped spec.

Gymnasium documents each environment in its class docstring with Markdown sections (``## Description``,
``## Action Space``, ``## Observation Space``, ``## Rewards``, ``## Episode End``) and tables or lists that name each
observation value and each discrete action. This module pulls those out, so a generic spec's prompt can say what the
task is and what ``obs[2]`` means. Everything here is best effort: a docstring that does not follow the layout
gives empty text and no names, and the caller falls back to ``obs[i]`` and ``action i``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["GymDoc", "parse_gym_doc"]

MAX_TEXT = 900
_SECTION = re.compile(r"^\s*##+\s*(.+?)\s*:?\s*$", re.MULTILINE)
_FENCE = re.compile(r"```.*?```", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_TABLE_ROW = re.compile(r"^\s*\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|", re.MULTILINE)
_LIST_ITEM = re.compile(r"^\s*[-*]\s*(\d+)\s*:\s*(.+?)\s*$", re.MULTILINE)


@dataclass
class GymDoc:
    """What a docstring says about a task."""

    description: str = ""
    reward: str = ""
    observation_names: dict[int, str] = field(default_factory=dict)
    action_names: dict[int, str] = field(default_factory=dict)


def _clean(text: str, limit: int = MAX_TEXT) -> str:
    text = _FENCE.sub(" ", text)
    text = _LINK.sub(r"\1", _TAG.sub("", text))
    text = re.sub(r"\s+", " ", text.replace("*", "").replace("`", "")).strip()
    if len(text) > limit:
        cut = text[:limit].rsplit(". ", 1)[0]
        text = (cut if len(cut) > limit // 2 else text[:limit]).rstrip(".") + " ..."
    return text


def _sections(doc: str) -> dict[str, str]:
    heads = list(_SECTION.finditer(doc))
    out: dict[str, str] = {}
    if heads and heads[0].start() > 0:
        out["intro"] = doc[: heads[0].start()]
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(doc)
        out[m.group(1).strip().lower()] = doc[m.end() : end]
    return out


def _numbered(text: str) -> dict[int, str]:
    """``| 0 | name | ...`` table rows, else ``- 0: name`` list items (the first run numbered from 0)."""
    for pattern in (_TABLE_ROW, _LIST_ITEM):
        found: dict[int, str] = {}
        for m in pattern.finditer(text):
            i = int(m.group(1))
            if i != len(found):
                if found:
                    break
                continue
            found[i] = _clean(m.group(2), 80)
        if found:
            return found
    return {}


def _pick(sections: dict[str, str], *prefixes: str) -> str:
    return " ".join(text for name, text in sections.items() if name.startswith(prefixes))


def parse_gym_doc(doc: str | None) -> GymDoc:
    """Description, reward and episode end, observation names and action names from a docstring."""
    if not doc:
        return GymDoc()
    sec = _sections(doc)
    description = _pick(sec, "description") or sec.get("intro", "")
    reward = _pick(sec, "reward")
    ending = _pick(sec, "episode end", "episode termination", "episode truncation")
    reward_text = _clean(reward, MAX_TEXT // 2 + 100)
    if ending:
        lead = reward_text + " Episode end: " if reward_text else "Episode end: "
        reward_text = lead + _clean(ending, MAX_TEXT // 2)
    return GymDoc(
        description=_clean(description),
        reward=reward_text,
        observation_names=_numbered(_pick(sec, "observation")),
        action_names=_numbered(_pick(sec, "action")),
    )
