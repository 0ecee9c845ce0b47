"""Frozen features: a text's encoding by the language model, computed once and kept.

**One forward pass per distinct text, alone.** A text is tokenized and run through the base model by itself (batch
1, no padding), so its encoding depends only on the model and the text, never on which texts were encoded beside it
(padded batches change the last bits). An encoding is kept in memory and on disk under
``CACHE/<model sha256>/encodings/<pooling>/<sha256 of the text>.npy`` (written atomically, read without pickle and
used only as a finite float32 vector of the model's width, else computed again: :mod:`.model_cache`): a second run
of the same task, or another task sharing texts, makes no forward pass. :attr:`Encoder.forward_passes` counts the passes
made.

**Pooling.** ``mean`` (the default): the mean of the last hidden states over the text's tokens. ``last``: the last
token's hidden state. A small causal model's last position is shaped to predict the next token (here whatever
follows the state's last bin), while the mean reads every token of the state's description; the common prefix of the
texts (task title and description) adds the same vector to every state's mean in a causal model, which the
features table's standardisation (:mod:`.features`) removes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from .backbone import LanguageModel
from .model_cache import ArrayCache, Note, unheard

__all__ = ["Encoder", "Pooling", "POOLINGS", "encoding"]

Pooling = Literal["mean", "last"]
POOLINGS: tuple[Pooling, ...] = ("mean", "last")


class Encoder:
    """Encodes texts with a frozen model, caching every encoding in memory and (with ``cache_dir``) on disk."""

    def __init__(self, lm: LanguageModel, pooling: Pooling = "mean", cache_dir: Path | None = None,
                 device: str = "cpu", note: Note = unheard) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.lm = lm
        self.pooling: Pooling = pooling
        self.device = device
        self.disk = ArrayCache(None if cache_dir is None else cache_dir / lm.identity.sha256 / "encodings" / pooling,
                               "encoding", np.dtype(np.float32), note)
        """The encodings kept on disk, each checked when read (:mod:`.model_cache`)."""
        self.memory: dict[str, np.ndarray] = {}
        self.forward_passes = 0
        """Forward passes made by this encoder (texts neither in memory nor on disk)."""
        self.disk_hits = 0
        if device != "cpu":
            lm.model.to(device)

    @property
    def width(self) -> int:
        return self.lm.hidden_size

    def _forward(self, text: str) -> np.ndarray:
        import torch

        tok = self.lm.tokenizer(text, return_tensors="pt")
        with torch.inference_mode():
            out = self.lm.model(input_ids=tok["input_ids"].to(self.device),
                                attention_mask=tok["attention_mask"].to(self.device))
        hidden = out.last_hidden_state[0]
        vec = hidden.mean(dim=0) if self.pooling == "mean" else hidden[-1]
        self.forward_passes += 1
        return np.asarray(vec.detach().to("cpu", torch.float32).numpy(), dtype=np.float32)

    def encode_one(self, text: str) -> np.ndarray:
        """``text``'s encoding, a float32 vector of the model's hidden size."""
        got = self.memory.get(text)
        if got is not None:
            return got
        got = self.disk.read(text, (self.width,))
        if got is not None:
            self.disk_hits += 1
        else:
            got = self._forward(text)
            self.disk.write(text, got)
        self.memory[text] = got
        return got

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), width) float32 encodings, in order."""
        if not texts:
            return np.zeros((0, self.width), dtype=np.float32)
        return np.stack([self.encode_one(t) for t in texts]).astype(np.float32, copy=False)


@contextlib.contextmanager
def encoding(say: Callable[[str], None] | None, encoder: Encoder, n: int) -> Iterator[None]:
    """Say that ``n`` state texts are being encoded and, once they are, the seconds it took and how many the model
    encoded (the others came from the cache): thousands of states take minutes on a small machine."""
    if say is not None:
        say(f"lm-policy: encoding {n} state texts ...")
    t0 = time.perf_counter()
    yield
    if say is not None:
        say(f"lm-policy: encoded {n} state texts in {time.perf_counter() - t0:.1f} s ({encoder.forward_passes} by "
            f"the model, {encoder.disk_hits} from the cache)")
