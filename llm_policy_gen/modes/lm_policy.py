"""``--mode lm-policy``: a language model is the policy network's backbone, a library learner trains the head.

Each discretized state is written as text (``prompts/lm_state.md``: the task's title and description, the state's
dimension names and bin ranges), the model at ``--lm-model`` (a GGUF file or a Hugging Face folder) encodes each text
once (:mod:`llm_policy_gen.lm.encoder`, frozen, cached on disk by the model's sha256 and the text), and SB3 PPO or
sb3-contrib TRPO (``--learner``) trains a small head over those features (:mod:`llm_policy_gen.lm.learner`).
``--lm-features onehot`` and ``random`` replace the encodings with the controls (no model needed for those).

**An iteration** is one learner update: a rollout of ``--lm-n-steps`` environment steps and its optimisation. Then
the policy is read out per state (each state's most probable action) and the read-out table goes to the keeper as
the iteration's one candidate, judged like any table (test seeds, paired confirmation, held-out seeds on adoption,
``accepted``), so ``evaluate``, ``report`` and ``plot`` read the run as they read any other. The run starts, like
the learner modes, by scoring the spec's initial table.

**Its own loop** (:class:`~llm_policy_gen.modes.base.OwnLoop`): the learner steps the run's learner environment
itself (:attr:`~llm_policy_gen.modes.base.RunServices.learner_env`), so its episodes are the run's training
episodes: every reset takes the run's next training seed and every finished episode is counted (episodes and steps)
in the iteration in which it ends, like the other modes' training episodes (an episode cut by the end of a rollout
goes on in the next one; one left unfinished when the run ends is not counted). Events carry ``lm_steps`` (the
learner's own step count) beside the run's totals.

**Resume.** The run writes the learner's state into ``checkpoint.npz`` with its own after every iteration (the
head's tensors, Adam's moments, the random streams, SB3's counters and last observation, the episode in progress:
:mod:`llm_policy_gen.lm.learner`), as arrays and JSON, never a pickle; ``train --resume`` rebuilds the learner from
the settings in ``config.json`` and loads that state, so a resumed run equals an uninterrupted one.

**No model calls.** The mode asks no backend for answers (its registry line says so: the run takes ``offline`` and
refuses another ``--backend``); its language model is ``--lm-model``.

**Not yet.** LoRA (``--lora``) and action scoring (``--lm-head scores``) are not built.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UserError
from .base import Setup, Step

if TYPE_CHECKING:
    from ..lm.learner import LearnerSettings, TableLearner
    from .base import RunServices

__all__ = ["LmPolicyMode"]


def _settings(setup: Setup) -> LearnerSettings:
    from ..lm.learner import LearnerSettings

    cfg = setup.cfg
    return LearnerSettings(algorithm=cfg.lm_learner, n_steps=cfg.lm_n_steps, batch_size=cfg.lm_batch_size,
                           n_epochs=cfg.lm_epochs, learning_rate=cfg.lm_learning_rate, gamma=cfg.lm_gamma,
                           ent_coef=cfg.lm_ent_coef, net_arch=list(cfg.lm_net_arch), device=cfg.lm_device,
                           seed=cfg.seed)


class LmPolicyMode:
    """A frozen language model's encodings of the state texts, a head trained by PPO or TRPO, read out as a table."""

    name = "lm-policy"
    needs_session = False
    judges_candidates = True

    def __init__(self) -> None:
        self.features: np.ndarray | None = None
        self.settings: LearnerSettings | None = None
        self.learner: TableLearner | None = None
        self.facts: dict[str, Any] = {}

    # ------------------------------------------------------------------ Mode
    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        """Load the model, encode every state's text (or build the control features) and fix the learner's
        settings; every problem is a one-line user error, before the run starts."""
        from ..lm import require_extra
        from ..lm.features import features_table

        cfg = setup.cfg
        require_extra()
        if cfg.lm_features == "lm" and not cfg.lm_model:
            raise UserError("--mode lm-policy needs --lm-model PATH (a .gguf file or a Hugging Face model folder) "
                            "for --lm-features lm; or give --lm-features onehot or random")
        if cfg.lm_device != "cpu":
            import torch

            if not cfg.lm_device.startswith("cuda") or not torch.cuda.is_available():
                raise UserError(f"bad --device {cfg.lm_device}: no such device here; accepted: cpu"
                                + (", cuda" if torch.cuda.is_available() else ""))
        self.settings = _settings(setup)
        facts: dict[str, Any] = {"features": cfg.lm_features, "learner": self.settings.describe()}
        encoder = self._encoder(setup) if cfg.lm_model and cfg.lm_features in ("lm", "random") else None
        raw: np.ndarray | None = None
        if encoder is not None:
            facts["lm_model"] = encoder.lm.describe()
            if cfg.lm_features == "lm":
                from ..lm.text import STATE_TEMPLATE, state_texts

                texts = state_texts(setup.spec, setup.observation)
                raw = encoder.encode(texts)
                facts.update(pooling=cfg.lm_pooling, state_template=STATE_TEMPLATE, state_texts=len(set(texts)),
                             lm_forward_passes=encoder.forward_passes, lm_encodings_from_cache=encoder.disk_hits)
        self.features = features_table(cfg.lm_features, setup.observation.n_states,
                                       encodings=raw,
                                       width=None if encoder is None else encoder.width, seed=cfg.seed)
        facts["features_width"] = int(self.features.shape[1])
        self.facts = facts
        return facts

    def _encoder(self, setup: Setup) -> Any:
        """The model loaded (its progress bars kept off the console) and its encoder."""
        import torch

        from ..lm.encoder import Encoder
        from ..lm.model import default_lm_cache, load_language_model

        cfg = setup.cfg
        assert cfg.lm_model is not None
        torch.set_num_threads(1)  # two threads on a shared 2-core machine were many times slower, not faster
        cache = Path(cfg.lm_cache) if cfg.lm_cache else default_lm_cache()
        with contextlib.redirect_stderr(io.StringIO()):
            lm = load_language_model(cfg.lm_model, cache)
        return Encoder(lm, cfg.lm_pooling, cache, device=cfg.lm_device)

    def build_learner(self, run: RunServices) -> TableLearner:
        """The learner over the run's learner environment (:class:`~llm_policy_gen.modes.base.OwnLoop`)."""
        from ..lm.learner import TableLearner

        assert self.features is not None and self.settings is not None
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
        for key in ("lm_forward_passes", "lm_encodings_from_cache"):
            if key in self.facts:
                out[key] = self.facts[key]
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Nothing of its own: the learner's state is the run's to save (:class:`~.base.OwnLoop`)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
