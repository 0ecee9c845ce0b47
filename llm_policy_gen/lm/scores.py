"""Action scoring (``--lm-head scores``, TWOSOME-style): the model's log-probability of each action's words.

**The prompt.** ``prompting/prompts/lm_action.md``: the state's text (:mod:`.text`), the list of the task's actions and
``Best action:``; the continuation scored is a space and the action's words (the spec's action name, e.g. ``move
left``). A continuation's score is the sum of its tokens' log-probabilities under the model, each token given the
prompt and the continuation's earlier tokens. The prompt and the continuation are tokenized apart and joined as
token ids, so the continuation's tokens are the same whatever precedes them.

**Normalisation over the valid actions.** The policy's logits are the actions' scores; the softmax over them is the
distribution over the valid actions only (TWOSOME's normalisation), never over the vocabulary. Actions whose names
have more tokens would lose by the sum alone (every token costs log-probability), so the score is divided by a
length (``--lm-score-norm``): ``word`` (the default, TWOSOME's word normalisation: the sum divided by the number of
words of the action's name), ``token`` (by the number of tokens) or ``sum`` (no division). The per-task zero-shot
figures for all three are in ``docs/lm-policy.md``.

**The output layer.** The loaded model is the base model (:mod:`.model` keeps no language-model head); the
next-token logits are its last hidden states times the input embedding matrix, which is the output layer of a model
whose ``tie_word_embeddings`` is true (SmolLM2-135M's GGUF file loads so). A model loaded with a separate output layer
(Qwen2.5-Coder-0.5B's GGUF file stores one) gets that matrix from its own files (:mod:`.output_layer`); one whose
files hold none is refused for ``--lm-head scores`` (one line, exit 2).

**Cost and cache.** The prompts' longest common token prefix (the task's title, description and actions: about 75
of SmolLM2's tokens) is run once; then each state's own tokens once, and each action's tokens over them
(:func:`state_logprobs`). With a frozen model every (prompt, continuation) pair is scored once and kept, in memory and
on disk under ``CACHE/<model sha256>/scores/<sha256 of the key>.npy`` (the raw sum and the token count, so every
normalisation reads the same file, written atomically, read without pickle, used only as finite float64 values of
the expected shape, else computed again: :mod:`.model_cache`). States are scored in fixed blocks of
16 consecutive states, one batch each (a batch's composition moves the last bits, so the key names the block and
the cached value is exactly the one a new computation gives). :attr:`ActionScorer.forward_passes` counts the
batches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..discretize import ActionDiscretizer, ObservationDiscretizer
from ..envs.spec import EnvSpec
from ..errors import UserError
from ..storage.templates import fill
from .backbone import LanguageModel
from .model_cache import ArrayCache, Note, unheard
from .output_layer import OUTPUT_BUFFER, attach_output_layer
from .state_text import StateTextVariant, state_text

__all__ = ["ACTION_TEMPLATE", "ScoreNorm", "SCORE_NORMS", "ActionScorer", "scoring_prompts", "continuations",
           "word_counts", "normalise", "output_embeddings", "ScoringTask", "tokenize_task", "prefix_states",
           "state_logprobs"]

ACTION_TEMPLATE = "lm_action.md"
ScoreNorm = Literal["word", "token", "sum"]
SCORE_NORMS: tuple[ScoreNorm, ...] = ("word", "token", "sum")


def scoring_prompts(spec: EnvSpec, observation: ObservationDiscretizer, actions: ActionDiscretizer,
                    folder: Path | None = None, variant: StateTextVariant = "plain") -> list[str]:
    """Every state's scoring prompt, in state order (``variant``: the state text's, :mod:`.state_text`)."""
    names = ", ".join(actions.describe(a) for a in range(actions.n_actions))
    return [fill(ACTION_TEMPLATE, folder, state_text=state_text(spec, observation, s, folder, variant), actions=names)
            for s in range(observation.n_states)]


def continuations(actions: ActionDiscretizer) -> list[str]:
    """The text scored after the prompt, per action: a space and the action's words."""
    return [" " + actions.describe(a).strip() for a in range(actions.n_actions)]


def word_counts(actions: ActionDiscretizer) -> np.ndarray:
    """(n_actions,) the number of words of each action's name (at least 1)."""
    return np.asarray([max(1, len(actions.describe(a).split())) for a in range(actions.n_actions)], dtype=np.float64)


def normalise(sums: Any, tokens: Any, words: Any, how: ScoreNorm) -> Any:
    """The scores (the policy's logits before the bias): ``sums`` divided by ``words``, ``tokens`` or nothing.
    Works on numpy arrays and torch tensors alike (broadcast over the last axis, the actions)."""
    if how == "word":
        return sums / words
    if how == "token":
        return sums / tokens
    if how == "sum":
        return sums
    raise ValueError(f"unknown score normalisation {how!r}; accepted: {', '.join(SCORE_NORMS)}")


def output_embeddings(model: Any) -> Any:
    """The matrix that turns a last hidden state into next-token logits: the tied input embeddings, or the output
    layer :func:`.output_layer.attach_output_layer` attached."""
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False):
        return model.get_input_embeddings().weight
    attached = getattr(model, OUTPUT_BUFFER, None)
    if attached is None:
        raise UserError("--lm-head scores needs the model's output layer: its input embeddings are not tied to it "
                        "and its files hold no output.weight (GGUF) or lm_head.weight (safetensors); use "
                        "--lm-head features")
    return attached


@dataclass(frozen=True)
class ScoringTask:
    """A task's scoring prompts and continuations as token ids: the prompts' common token prefix (run once, its
    keys and values shared by every row), each state's remaining prompt tokens and each action's tokens."""

    prefix: tuple[int, ...]
    suffixes: tuple[tuple[int, ...], ...]
    conts: tuple[tuple[int, ...], ...]

    @property
    def n_actions(self) -> int:
        return len(self.conts)


def tokenize_task(tokenizer: Any, prompts: Sequence[str], conts: Sequence[str]) -> ScoringTask:
    """The prompts and continuations tokenized apart (so a continuation's tokens never depend on its prompt), the
    prompts split after their longest common token prefix (each keeps at least its last token)."""
    ids = [tuple(int(i) for i in tokenizer(p)["input_ids"]) for p in prompts]
    cids = [tuple(int(i) for i in tokenizer(c, add_special_tokens=False)["input_ids"]) for c in conts]
    if any(not c for c in cids):
        raise ValueError("an action's words have no tokens")
    n = min(len(x) for x in ids) - 1
    for x in ids[1:]:
        n = next((i for i in range(n) if x[i] != ids[0][i]), n)
    return ScoringTask(ids[0][:n], tuple(x[n:] for x in ids), tuple(cids))


def _cache(model: Any, layers: Sequence[tuple[Any, Any]] | None = None) -> Any:
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers or None, config=model.config)


def _layers(cache: Any) -> list[tuple[Any, Any]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def prefix_states(model: Any, task: ScoringTask, device: str = "cpu") -> list[tuple[Any, Any]]:
    """The keys and values of every layer for the common prefix (batch 1); differentiable when grad is on."""
    import torch

    if not task.prefix:
        return []
    cache = _cache(model)
    model(input_ids=torch.tensor([task.prefix], dtype=torch.long, device=device), cache=cache, use_cache=True)
    return _layers(cache)


def state_logprobs(model: Any, task: ScoringTask, states: Sequence[int], prefix: Sequence[tuple[Any, Any]],
                   device: str = "cpu") -> tuple[Any, Any]:
    """(sums (len(states), n_actions), token counts (n_actions,)): each action's summed token log-probabilities
    after each state's prompt; differentiable when grad is on.

    Two passes over the shared prefix's keys and values: the states' remaining prompt tokens (one row a state,
    right-padded), then the actions' tokens (one row a state and action, over that state's keys and values, placed
    by explicit positions right after the state's own tokens). A state's prompt is thus run once, not once per
    action; padding is masked, so every real token sees only the real tokens before it."""
    import torch

    n_s, n_a, p = len(states), task.n_actions, len(task.prefix)
    lens = [len(task.suffixes[s]) for s in states]
    width = max(lens)
    ids = torch.zeros((n_s, width), dtype=torch.long)
    mask = torch.zeros((n_s, p + width), dtype=torch.long)
    mask[:, :p] = 1
    for i, s in enumerate(states):
        ids[i, :lens[i]] = torch.tensor(task.suffixes[s], dtype=torch.long)
        mask[i, p:p + lens[i]] = 1
    positions = (p + torch.arange(width)).unsqueeze(0).expand(n_s, -1)
    cache = _cache(model, [(k.expand(n_s, -1, -1, -1), v.expand(n_s, -1, -1, -1)) for k, v in prefix])
    hidden = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                   cache=cache, use_cache=True).last_hidden_state
    last = hidden[torch.arange(n_s), torch.tensor(lens) - 1]  # (n_s, H): predicts each action's first token
    emb = output_embeddings(model)
    first = torch.tensor([c[0] for c in task.conts], dtype=torch.long, device=device)
    sums = torch.log_softmax((last @ emb.T).float(), dim=-1)[:, first]  # (n_s, n_a)
    cwidth = max(len(c) for c in task.conts)
    if cwidth > 1:  # the actions' later tokens, each predicted by the one before it
        rows = n_s * n_a
        cids = torch.zeros((rows, cwidth - 1), dtype=torch.long)
        cmask = torch.zeros((rows, cwidth - 1), dtype=torch.long)
        for a, c in enumerate(task.conts):
            if len(c) > 1:
                cids[a::n_a, :len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
                cmask[a::n_a, :len(c) - 1] = 1
        cpos = torch.tensor(lens).repeat_interleave(n_a).unsqueeze(1) + p + torch.arange(cwidth - 1).unsqueeze(0)
        ccache = _cache(model, [(k.repeat_interleave(n_a, 0), v.repeat_interleave(n_a, 0)) for k, v in _layers(cache)])
        chidden = model(input_ids=cids.to(device), attention_mask=torch.cat([mask.repeat_interleave(n_a, 0), cmask],
                                                                           1).to(device),
                        position_ids=cpos.to(device), cache=ccache, use_cache=True).last_hidden_state
        r_l: list[int] = []
        t_l: list[int] = []
        y_l: list[int] = []
        for row in range(rows):
            c = task.conts[row % n_a]
            for j in range(1, len(c)):
                r_l.append(row)
                t_l.append(j - 1)
                y_l.append(c[j])
        r, t = torch.tensor(r_l, dtype=torch.long), torch.tensor(t_l, dtype=torch.long)
        y = torch.tensor(y_l, dtype=torch.long, device=device)
        lp = torch.log_softmax((chidden[r, t] @ emb.T).float(), dim=-1).gather(1, y.unsqueeze(1)).squeeze(1)
        rest = torch.zeros(rows, dtype=lp.dtype, device=device).index_add(0, r.to(device), lp)
        sums = sums + rest.reshape(n_s, n_a)
    counts = torch.tensor([float(len(c)) for c in task.conts], dtype=sums.dtype, device=device)
    return sums, counts


class ActionScorer:
    """Scores every action after every state's prompt with a frozen model, cached in memory and on disk (see the
    module doc)."""

    def __init__(self, lm: LanguageModel, cache_dir: Path | None = None, device: str = "cpu",
                 note: Note = unheard) -> None:
        attach_output_layer(lm, cache_dir, note)
        output_embeddings(lm.model)  # refuse a model without an output layer before any pass
        self.lm = lm
        self.device = device
        self.disk = ArrayCache(None if cache_dir is None else cache_dir / lm.identity.sha256 / "scores", "scores",
                               np.dtype(np.float64), note)
        """The scores kept on disk, each checked when read (:mod:`.model_cache`)."""
        self.memory: dict[str, np.ndarray] = {}
        self.block = 16
        """States scored in one batch."""
        self.forward_passes = 0
        """Batches scored (each a block of states with all their actions), not counting the shared prefix's."""
        self.disk_hits = 0
        if device != "cpu":
            lm.model.to(device)

    def _lookup(self, key: str, n_actions: int) -> np.ndarray | None:
        got = self.memory.get(key)
        if got is not None:
            return got
        got = self.disk.read(key, (2, n_actions))
        if got is not None:
            self.disk_hits += 1
            self.memory[key] = got
        return got

    def _store(self, key: str, value: np.ndarray) -> None:
        self.memory[key] = value
        self.disk.write(key, value)

    def raw(self, prompts: Sequence[str], conts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(sums, token counts), each (len(prompts), len(conts)): every continuation after every prompt.

        The states are scored in fixed blocks of :attr:`block` consecutive states (one batch each); a block with any
        state missing from the cache is scored whole. A state's key is the prompt, the continuations, the length of
        the prompts' shared token prefix and the block's prompts (batch composition and the split decide the last
        bits), so a cached value is the one this call would compute."""
        import torch

        task = tokenize_task(self.lm.tokenizer, prompts, conts)
        prefix: list[tuple[Any, Any]] | None = None
        out = np.zeros((len(prompts), 2, len(conts)), dtype=np.float64)
        for lo in range(0, len(prompts), self.block):
            block = list(range(lo, min(lo + self.block, len(prompts))))
            head = hashlib.sha256("\0".join([str(len(task.prefix)), *(prompts[s] for s in block)]).encode()
                                  ).hexdigest()
            keys = ["\0".join([head, prompts[s], *conts]) for s in block]
            got = [self._lookup(k, len(conts)) for k in keys]
            if any(g is None for g in got):
                with torch.inference_mode():
                    if prefix is None:
                        prefix = prefix_states(self.lm.model, task, self.device)
                    sums, counts = state_logprobs(self.lm.model, task, block, prefix, self.device)
                self.forward_passes += 1
                got = []
                for i, k in enumerate(keys):
                    value = np.stack([sums[i].cpu().double().numpy(), counts.cpu().double().numpy()])
                    self._store(k, value)
                    got.append(value)
            for i, s in enumerate(block):
                out[s] = got[i]
        return out[:, 0, :], out[:, 1, :]

    def scores(self, spec: EnvSpec, how: ScoreNorm = "word") -> np.ndarray:
        """(n_states, n_actions) normalised scores of every state of ``spec``: the zero-shot logits."""
        obs, acts = spec.observation_discretizer(), spec.action_discretizer()
        sums, tokens = self.raw(scoring_prompts(spec, obs, acts), continuations(acts))
        return np.asarray(normalise(sums, tokens, word_counts(acts), how), dtype=np.float64)
