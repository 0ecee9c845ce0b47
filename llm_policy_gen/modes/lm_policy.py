"""``--mode lm-policy``: a language model is the policy network's backbone, a library learner trains the head.

Each discretized state is written as text (``prompting/prompts/lm_state.md``: the task's title and description, the
state's dimension names and bin ranges), the model at ``--lm-model`` (a GGUF file or a Hugging Face folder) encodes each
text once (:mod:`llm_policy_gen.lm.encoder`, frozen, cached on disk by the model's sha256 and the text), and SB3 PPO or
sb3-contrib TRPO (``--lm-learner``) trains a small head over those features (:mod:`llm_policy_gen.lm.agent`).
``--lm-features onehot|random|index|thermometer`` are the controls (:mod:`llm_policy_gen.lm.features`, no model needed);
``--lm-state-text meaning`` tells the state in the task's words (:mod:`llm_policy_gen.lm.meaning`).

**An iteration** is one learner update (a rollout of ``--lm-n-steps`` steps and its optimisation); the policy read
out per state (its most probable action) goes to the keeper as the iteration's one candidate, judged like any table,
so ``evaluate``, ``report`` and ``plot`` read the run as any other. The run starts by scoring the spec's table.

**Its own loop** (:class:`~llm_policy_gen.modes.base.OwnLoop`): the learner steps the run's learner environment
itself (:attr:`~llm_policy_gen.modes.base.RunServices.learner_env`), so its episodes are the run's training
episodes: every reset takes the run's next training seed and every finished episode is counted (episodes and steps)
in the iteration in which it ends, like the other modes' training episodes (an episode cut by the end of a rollout
goes on in the next one; one left unfinished when the run ends is not counted). Events carry ``lm_steps`` (the
learner's own step count) beside the run's totals.

**Resume.** The learner's state (tensors, Adam's moments, random streams, SB3's counters, the episode in progress:
:mod:`llm_policy_gen.lm.agent`) is in ``checkpoint.npz`` as arrays and JSON, never a pickle, after every iteration;
``train --resume`` rebuilds the learner from ``config.json`` and loads it: a resumed run equals an uninterrupted one.

**No backend.** It proposes nothing: the run builds no backend and is named ``lm-policy(MODEL)`` (:meth:`method`).
**Heads.** ``--lm-head features`` (the default): SB3's MLP over the features table. ``--lm-head scores``: the
model's length-normalised log-probabilities of each action's words after the state's text plus a learned bias per
action (:mod:`llm_policy_gen.lm.heads`, :mod:`llm_policy_gen.lm.scores`); before any update the read-out is the
model's zero-shot table (``config.json``: ``zero_shot_table``). ``--lm-lora R`` fine-tunes the model through that head
with ``peft`` adapters (:mod:`llm_policy_gen.lm.lora`), PPO only; the adapters are among the head's tensors the
checkpoint holds (the frozen model's weights never are).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import field_validator

from ..errors import UserError
from ..lm.coordinates import state_coordinates
from ..lm.meaning import check_meaning
from ..lm.model_files import resolve_model
from ..lm.resume_identity import check_resumed_path, check_same_model, recorded_path
from ..registry import PluginOptions, setting
from ..storage.sizes import Need, check_memory
from .base import Method, ModeBase, Setup, Step
from .selection import on_policy_counting

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..lm.agent import LearnerSettings, TableLearner
    from .base import RunServices

__all__ = ["LmPolicyMode", "LmPolicyOptions", "MAX_LORA_RANK"]

MAX_LORA_RANK = 1024
"""The largest ``--lm-lora`` rank (ranks in use are 4 to 256; an adapter's rank above the model's hidden size, which
small models have at 576 to 2,048, adds nothing, and is refused once the model is loaded)."""


class LmPolicyOptions(PluginOptions):
    """The lm-policy mode's options: the language model, the features over it and the library learner.

    A new setting of this mode (``--lm-lora``, ``--lm-head``) is one more field here: its flag, TOML key and
    config.json key follow from the field, and the mode reads it as ``self.options.<name>``."""

    lm_model: str | None = setting(None, "a .gguf file, a Hugging Face model folder or models:NAME (smollm2, "
                                   "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)", "lm-policy mode: the language model "
                                   "that encodes each state's text (not --backend, whose llamacpp: means llama.cpp); "
                                   "models:NAME is tools/fetch_model.py NAME's file; with --resume, the same model "
                                   "at another path (its sha256 is checked).", resume=True)
    lm_features: Literal["lm", "onehot", "random", "index", "thermometer"] = setting(
        "lm", "lm, onehot, random, index or thermometer", "lm-policy mode: the head's state features: the model's "
        "encodings (lm), or the controls: one-hot states (onehot), random features of the model's width (random: "
        "576 without --lm-model), each dimension's bin index scaled to [-1, 1] (index) or its thermometer code "
        "(thermometer).")
    lm_state_text: Literal["plain", "meaning"] = setting(
        "plain", "plain or meaning", "lm-policy mode: the state text the model reads: each dimension's bin range "
        "(plain), or the state in the task's words from the spec's [meaning] table (meaning: what lies in each "
        "neighbouring cell, which way the pole leans and how fast).")
    lm_pooling: Literal["mean", "last"] = setting("mean", "mean or last", "lm-policy mode: an encoding is the mean of "
                                                  "the last hidden states over the text's tokens (mean) or the last "
                                                  "token's (last).")
    lm_learner: Literal["ppo", "trpo"] = setting("ppo", "ppo or trpo", "lm-policy mode: SB3 PPO or sb3-contrib TRPO.")
    lm_device: str = setting("cpu", "cpu, or cuda where a GPU is present", "lm-policy mode: torch device of the model "
                             "and the head.")
    lm_n_steps: int = setting(256, "an integer >= 2", "lm-policy mode: environment steps per rollout; an iteration is "
                              "one rollout and its optimisation.", ge=2)
    lm_batch_size: int = setting(64, "an integer >= 2", "lm-policy mode: PPO's minibatch (TRPO: its value "
                                 "function's).", ge=2)
    lm_epochs: int = setting(10, "an integer >= 1", "lm-policy mode: PPO's passes over each rollout (TRPO: value "
                             "function updates).", ge=1)
    lm_learning_rate: float = setting(3e-4, "a number > 0", "lm-policy mode: Adam's step size (TRPO: the value "
                                      "function's).", gt=0.0)
    lm_gamma: float = setting(0.99, "a number in [0, 1)", "lm-policy mode: the learner's discount.", ge=0.0, lt=1.0)
    lm_ent_coef: float = setting(0.0, "a number >= 0", "lm-policy mode: PPO's entropy bonus.", ge=0.0)
    lm_net_arch: list[int] = setting([64, 64], "a list of integers >= 1", "lm-policy mode: hidden layers of the head's "
                                     "policy and value networks.")
    lm_cache: str | None = setting(None, "a folder", "lm-policy mode: where the model's safetensors copy and the "
                                   "encodings are kept (default: ~/.cache/llm-policy-gen/lm).", operational=True)
    lm_head: Literal["features", "scores"] = setting(
        "features", "features or scores", "lm-policy mode: the actor: an MLP over the state features (features), or "
        "the model's log-probabilities of each action's words after the state's text plus a learned bias per action "
        "(scores, TWOSOME-style; before any update its read-out is the model's zero-shot table).")
    lm_score_norm: Literal["word", "token", "sum"] = setting(
        "word", "word, token or sum", "lm-policy mode, --lm-head scores: an action's summed token log-probability "
        "divided by the number of words of its name (word), of its tokens (token), or not divided (sum).")
    lm_lora: int = setting(0, f"an integer in 0..{MAX_LORA_RANK}", "lm-policy mode: fine-tune the model with peft "
                           "LoRA adapters of this rank on the attention's q and v projections, through --lm-head "
                           "scores, with PPO (0: the model stays frozen; at most the model's hidden size).", ge=0,
                           le=MAX_LORA_RANK)

    @field_validator("lm_model", "lm_cache")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        """A path is kept absolute (``~`` expanded), so that config.json names the files the run read wherever a
        resume starts from (a relative path in an older config.json is read from the folder the resume runs in); a
        ``models:NAME`` is kept as written, its name checked."""
        from ..lm.model_files import check_model_name, is_model_name

        if is_model_name(v):
            return check_model_name(str(v))
        return os.path.abspath(os.path.expanduser(v)) if v else v

    @field_validator("lm_net_arch")
    @classmethod
    def _net_arch(cls, v: list[int]) -> list[int]:
        if not v or any(n < 1 for n in v):
            raise ValueError("hidden layer sizes must be >= 1")
        return v


def _settings(o: LmPolicyOptions, seed: int) -> LearnerSettings:
    from ..lm.agent import LearnerSettings

    return LearnerSettings(algorithm=o.lm_learner, n_steps=o.lm_n_steps, batch_size=o.lm_batch_size,
                           n_epochs=o.lm_epochs, learning_rate=o.lm_learning_rate, gamma=o.lm_gamma,
                           ent_coef=o.lm_ent_coef, net_arch=list(o.lm_net_arch), device=o.lm_device, seed=seed)


def _width(o: LmPolicyOptions, n_states: int, hidden: int | None) -> int:
    """The features' width: the states' for one-hot ones (at most that for index and thermometer codes, which have
    fewer units than states), else the model's hidden size (unknown: the random control's default width, or 1
    where the model decides it)."""
    from ..lm.features import DEFAULT_RANDOM_WIDTH, STRUCTURED_KINDS

    if o.lm_features == "onehot" or o.lm_features in STRUCTURED_KINDS:
        return n_states
    if hidden is not None:
        return hidden
    return DEFAULT_RANDOM_WIDTH if o.lm_features == "random" and not o.lm_model else 1


def _needs(o: LmPolicyOptions, settings: LearnerSettings, n_states: int, n_actions: int,
           hidden: int | None) -> list[Need]:
    """The features table and the learner's arrays (:mod:`llm_policy_gen.sizes`), over the model's width
    ``hidden`` (None: not known yet)."""
    width = _width(o, n_states, hidden)
    return [(f"the features table ({n_states:,} states x {width:,} features, float32)", n_states * width * 4),
            *settings.memory_needs(n_states, n_actions, width, actor_mlp=o.lm_head == "features")]


class LmPolicyMode(ModeBase):
    """A frozen language model's encodings of the state texts, a head trained by PPO or TRPO, read out as a table."""

    name = "lm-policy"
    needs_backend = False
    backend_spelling = "offline"
    candidates_per_iteration = 1
    selects = ("keeper", "none")
    Options = LmPolicyOptions

    def __init__(self) -> None:
        self.options = LmPolicyOptions()
        """This run's options (read from its configuration by :meth:`prepare`)."""
        self.features: np.ndarray | None = None
        self.settings: LearnerSettings | None = None
        self.learner: TableLearner | None = None
        self.facts: dict[str, Any] = {}
        self.named_model: str | None = None
        """On a resume, the model path the run recorded when it started: its name stays the run's when the same
        model (by sha256) is given at another path."""
        self.head: Any = None  # the scores head (--lm-head scores), or None for the features head
        self.model_path: str | None = None
        """The model's file: ``--lm-model``, a ``models:NAME`` resolved (:mod:`llm_policy_gen.lm.model_files`)."""

    def method(self, cfg: TrainConfig) -> Method:
        """``lm-policy(MODEL)`` (``.gguf`` dropped), a control's features after it: ``lm-policy(onehot)``."""
        o = cfg.options_for(LmPolicyOptions)
        used = o.lm_model if o.lm_model and (o.lm_features in ("lm", "random") or o.lm_head == "scores") else None
        used = self.named_model if used and self.named_model else used
        stem = used.removeprefix("models:") if used and used.startswith("models:") else used
        parts = [Path(stem.rstrip("/\\")).name.removesuffix(".gguf") if stem else "", o.lm_features,
                 "" if o.lm_state_text == "plain" else f"{o.lm_state_text} text"]
        return Method(f"{self.name}({', '.join(p for p in parts if p not in ('', 'lm'))})", used or "", bool(used))

    def counting(self, cfg: TrainConfig) -> str:
        return on_policy_counting(cfg)

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        """Load the model, encode every state's text (or build the control features) and fix the learner's
        settings; every problem is a one-line user error, before the run starts."""
        from ..lm import require_extra
        from ..lm.features import STRUCTURED_KINDS, features_table

        o = self.options = setup.cfg.options_for(LmPolicyOptions)
        require_extra()
        self.model_path = resolve_model(o.lm_model) if o.lm_model else None  # models:NAME -> its file
        if setup.record is not None:
            check_resumed_path(setup.record, o.lm_model)
            self.named_model = recorded_path(setup.record)
        if o.lm_features == "lm" and not o.lm_model:
            raise UserError("--mode lm-policy needs --lm-model PATH (a .gguf file or a Hugging Face model folder) "
                            "for --lm-features lm; or a control: --lm-features onehot, random, index or thermometer")
        if o.lm_head == "scores" and not o.lm_model:
            raise UserError("--lm-head scores needs --lm-model PATH (a .gguf file or a Hugging Face model folder): "
                            "the actions are scored by the model")
        texts_read = o.lm_features == "lm" or o.lm_head == "scores"
        if o.lm_state_text != "plain" and not texts_read:
            raise UserError(f"--lm-state-text {o.lm_state_text} changes the text a model reads: give --lm-features "
                            "lm or --lm-head scores (the controls read no text), or --lm-state-text plain")
        if o.lm_state_text == "meaning":
            check_meaning(setup.spec, setup.observation)
        if o.lm_lora and o.lm_head != "scores":
            raise UserError(f"--lm-lora {o.lm_lora} fine-tunes the model through the scores head; add --lm-head "
                            "scores (or give --lm-lora 0)")
        if o.lm_lora and o.lm_learner != "ppo":
            raise UserError(f"--lm-lora {o.lm_lora} runs with --lm-learner ppo: sb3-contrib's TRPO differentiates "
                            "every parameter of the policy, the frozen model's weights included")
        if o.lm_device != "cpu":
            import torch

            if not o.lm_device.startswith("cuda") or not torch.cuda.is_available():
                raise UserError(f"bad --lm-device {o.lm_device}: no such device here; accepted: cpu"
                                + (", cuda" if torch.cuda.is_available() else ""))
        self.settings = _settings(o, setup.cfg.seed)
        facts: dict[str, Any] = {"features": o.lm_features, "head": o.lm_head, "learner": self.settings.describe()}
        header = self._header_width(setup) if o.lm_features == "random" and o.lm_head == "features" else None
        lm = self._model(setup) if header is None and o.lm_model and (o.lm_features in ("lm", "random") or
                                                                      o.lm_head == "scores") else None
        hidden = header[1] if header is not None else (None if lm is None else int(lm.hidden_size))
        n_states = setup.observation.n_states
        check_memory(_needs(o, self.settings, n_states, setup.actions.n_actions, hidden))  # the model's width known
        raw: np.ndarray | None = None
        coords = state_coordinates(setup.spec, setup.observation) if o.lm_features in STRUCTURED_KINDS else None
        if coords is not None:
            facts["coordinates"] = coords.describe()
        if header is not None:
            facts["lm_model"] = header[0]
        if lm is not None:
            facts["lm_model"] = lm.describe()
            if o.lm_features == "lm":
                from ..lm.encoder import Encoder, encoding
                from ..lm.state_text import STATE_TEMPLATE, state_texts

                encoder = Encoder(lm, o.lm_pooling, self._cache(setup), device=o.lm_device, note=setup.notice)
                texts = state_texts(setup.spec, setup.observation, variant=o.lm_state_text)
                with encoding(setup.notice, encoder, len(set(texts))):
                    raw = encoder.encode(texts)
                facts.update(pooling=o.lm_pooling, state_template=STATE_TEMPLATE, state_texts=len(set(texts)),
                             lm_forward_passes=encoder.forward_passes, lm_encodings_from_cache=encoder.disk_hits)
        self.features = features_table(o.lm_features, n_states, encodings=raw, width=hidden, seed=setup.cfg.seed,
                                       coords=coords)
        facts["features_width"] = int(self.features.shape[1])
        if o.lm_head == "scores":
            assert lm is not None
            facts.update(self._scores_head(setup, lm))
        self.facts = facts
        return facts

    def _cache(self, setup: Setup) -> Path:
        from ..lm.backbone import default_lm_cache

        o = self.options
        return Path(o.lm_cache) if o.lm_cache else default_lm_cache()

    def _scores_head(self, setup: Setup, lm: Any) -> dict[str, Any]:
        """The scores head (:mod:`llm_policy_gen.lm.heads`): the frozen model's cached scores, or LoRA adapters."""
        from ..lm.heads import frozen_scores_head, lora_scores_head
        from ..lm.scores import (
            ACTION_TEMPLATE,
            ActionScorer,
            continuations,
            normalise,
            scoring_prompts,
            tokenize_task,
            word_counts,
        )

        o = self.options
        acts = setup.spec.action_discretizer()
        prompts = scoring_prompts(setup.spec, setup.observation, acts, variant=o.lm_state_text)
        words = word_counts(acts)
        facts: dict[str, Any] = {"score_norm": o.lm_score_norm, "action_template": ACTION_TEMPLATE,
                                 "lora_rank": o.lm_lora}
        if o.lm_lora == 0:
            scorer = ActionScorer(lm, self._cache(setup), device=o.lm_device, note=setup.notice)
            sums, tokens = scorer.raw(prompts, continuations(acts))
            scores = np.asarray(normalise(sums, tokens, words, o.lm_score_norm), dtype=np.float64)
            self.head = frozen_scores_head(scores)
            facts.update(zero_shot_table=np.argmax(scores, axis=1).tolist(), lm_score_batches=scorer.forward_passes,
                         lm_scores_from_cache=scorer.disk_hits)
            return facts
        from ..lm.lora import TARGET_MODULES, adapter_sizes, lora_model, trainable_count

        if o.lm_lora > lm.hidden_size:
            raise UserError(f"bad --lm-lora {o.lm_lora}: over the model's hidden size ({lm.hidden_size}); accepted "
                            f"1..{lm.hidden_size}")
        check_memory([(f"the LoRA adapters of rank {o.lm_lora} and their copy of the model",
                       adapter_sizes(lm.model, o.lm_lora))])
        adapted = lora_model(lm.model, o.lm_lora, seed=setup.cfg.seed, device=o.lm_device)
        task = tokenize_task(lm.tokenizer, prompts, continuations(acts))
        self.head = lora_scores_head(adapted, task, words, o.lm_score_norm, o.lm_device)
        facts.update(lora_targets=list(TARGET_MODULES), lora_alpha=2 * o.lm_lora, lora_dropout=0.0,
                     lora_trainable=trainable_count(adapted), scoring_prefix_tokens=len(task.prefix))
        return facts

    def _header_width(self, setup: Setup) -> tuple[dict[str, Any], int] | None:
        """The model's facts and width from its file's header, not loaded (the random control at its width)."""
        import torch

        from ..lm.model_files import header_facts

        if self.model_path is None:
            return None
        torch.set_num_threads(1)  # as a loaded model's run sets it
        if setup.record is not None:
            check_same_model(setup.record, self.model_path)
        return header_facts(self.model_path)

    def _model(self, setup: Setup) -> Any:
        """The model loaded (its progress bars kept off the console)."""
        import torch

        from ..lm.backbone import load_language_model

        torch.set_num_threads(1)  # two threads on a shared 2-core machine were many times slower, not faster
        assert self.model_path is not None
        if setup.record is not None:
            check_same_model(setup.record, self.model_path)
        with contextlib.redirect_stderr(io.StringIO()):
            return load_language_model(self.model_path, self._cache(setup), note=setup.notice)

    def memory(self, cfg: TrainConfig, n_states: int, n_actions: int) -> list[Need]:
        """What the learner's arrays take at least, before the model is loaded (its width then counts as 1)."""
        o = cfg.options_for(LmPolicyOptions)
        return _needs(o, _settings(o, cfg.seed), n_states, n_actions, None)

    def build_learner(self, run: RunServices) -> TableLearner:
        """The learner over the run's learner environment (:class:`~llm_policy_gen.modes.base.OwnLoop`)."""
        from ..lm.agent import TableLearner

        assert self.features is not None and self.settings is not None
        if self.head is not None:
            from ..lm.heads import ScoresLearner

            self.learner = ScoresLearner(run.learner_env, self.features, self.settings, self.head)
        else:
            self.learner = TableLearner(run.learner_env, self.features, self.settings)
        return self.learner

    def start(self, run: RunServices) -> None:
        """Score the initial table, as the learner modes do."""
        run.start_from_initial()

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.learner is not None
        step = run.update_learner(iteration)
        step.fields.update(lm_steps=self.learner.steps, lm_updates=self.learner.updates,
                           lm_episodes=len(step.train_episodes))
        return step

    def finish(self, run: RunServices) -> dict[str, Any]:
        out: dict[str, Any] = {"features": self.facts.get("features")}
        if self.learner is not None:
            out.update(lm_steps=self.learner.steps, lm_updates=self.learner.updates)
        if self.head is not None and hasattr(self.head, "model_passes"):
            out["lm_model_passes"] = self.head.model_passes
        for key in ("lm_forward_passes", "lm_encodings_from_cache", "lm_score_batches", "lm_scores_from_cache"):
            if key in self.facts:
                out[key] = self.facts[key]
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The LoRA head's count of model passes, which a resumed run goes on from; the learner's state is the
        run's to save (:class:`~.base.OwnLoop`)."""
        passes = getattr(self.head, "model_passes", None)
        return {} if passes is None else {"lm_model_passes": int(passes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "lm_model_passes" in state and hasattr(self.head, "model_passes"):
            assert self.head is not None
            self.head.model_passes = int(state["lm_model_passes"])
