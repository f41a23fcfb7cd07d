"""Running mean and standard deviation, for observation normalisation and return (value) scaling;
and :class:`DatasetObsNorm`, the observation normalisation of algorithms that learn from a fixed
dataset (TD3+BC, behaviour cloning, GAIL's discriminator).

:class:`RunningMeanStd` is an ``nn.Module`` whose statistics are registered buffers, so they are
part of the owning policy's ``state_dict``: checkpoints save them, a resumed run restores them, and
the test collector (which acts with the same policy object) normalises with the same numbers as
training. Statistics change only when :meth:`RunningMeanStd.update` is called — the on-policy
algorithms call it once per collect on the whole rollout, never per env step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo.nets import RunningMeanStd, is_image_space
from rlblocks.contracts import Buffer, ConfigError

__all__ = ["DatasetObsNorm", "RunningMeanStd"]

#: observations read per chunk while computing a dataset's statistics
_FIT_CHUNK = 65_536


class DatasetObsNorm(nn.Module):
    """Mixin of a policy that normalises observations with a dataset's per-feature statistics:
    ``s -> (s - mean) / (std + eps)``, with ``mean`` and ``std`` computed once from every
    observation of the dataset (TD3+BC, Fujimoto & Gu 2021, section 5; behaviour cloning;
    GAIL's discriminator).

    The statistics are the policy's buffers ``obs_mean``, ``obs_scale`` (``1 / (std + eps)``)
    and ``obs_count`` (how many observations they came from; 0: not fitted, the identity), so
    checkpoints keep them and a loaded policy acts as the saved one. A policy calls
    :meth:`init_obs_norm` in its constructor, :meth:`fit_obs_norm_once` before its first
    update (or :meth:`fit_obs_norm` when it is given its dataset) and :meth:`normalize_obs`
    wherever its networks read observations. Put it before the policy's base class::

        class MyPolicy(DatasetObsNorm, OffPolicyPolicy): ...
    """

    obs_mean: torch.Tensor
    obs_scale: torch.Tensor
    obs_count: torch.Tensor
    obs_norm: bool
    """Whether observations are normalised (decided by :meth:`init_obs_norm`)."""

    def init_obs_norm(
        self,
        space: gym.Space,
        setting: bool | None,
        eps: float,
        who: str = "this algorithm",
        auto: bool = True,
    ) -> None:
        """Register the statistics for observations of ``space``: normalised when ``setting``
        is True, or (None) when they are a vector Box, the one kind per-feature statistics fit;
        ``eps`` is added to the standard deviation; ``who`` names the algorithm in messages,
        ``auto`` says whether its config takes None. True with any other space is refused in
        one line naming the fix."""
        vector = isinstance(space, gym.spaces.Box) and not is_image_space(space)
        if setting and not vector:
            hint = " (or leave it out: on for vector observations)" if auto else ""
            raise ConfigError(
                f"algo.obs_norm normalises each feature of a vector observation, and {space} is "
                f"not one; set algo.obs_norm=false{hint}"
            )
        self.obs_norm = vector if setting is None else bool(setting)
        self.obs_norm_eps = float(eps)
        self._obs_norm_who = who
        shape = tuple(space.shape or ()) if self.obs_norm else ()
        self.register_buffer("obs_mean", torch.zeros(shape))
        self.register_buffer("obs_scale", torch.ones(shape))
        self.register_buffer("obs_count", torch.zeros((), dtype=torch.float64))
        self._obs_fitted = False  # host copy of obs_count > 0, read once per load

    @torch.no_grad()
    def fit_obs_norm(self, buffer: Buffer) -> None:
        """Set the statistics from every observation stored in ``buffer`` (the dataset), read
        in chunks so a large dataset is never copied whole."""
        index = buffer.sample_index(0)
        if len(index) == 0:
            raise ConfigError(
                f"{self._obs_norm_who} normalises observations with the dataset's statistics, "
                "but the buffer is empty; fill it first (or set algo.obs_norm=false)"
            )
        stats = RunningMeanStd(self.obs_mean.shape, epsilon=0.0, clip=None)
        for start in range(0, len(index), _FIT_CHUNK):
            stats.update(np.asarray(buffer.get(index[start : start + _FIT_CHUNK], "obs")))
        self.obs_mean.copy_(stats.mean.float())
        self.obs_scale.copy_(1.0 / (stats.var.sqrt() + self.obs_norm_eps).float())
        self.obs_count.copy_(stats.count)
        self._obs_fitted = True

    def fit_obs_norm_once(self, buffer: Buffer | None) -> None:
        """Fit the statistics to ``buffer`` unless they are fitted or came with loaded weights
        (normalisation off, or no data yet: nothing). Reads the device's ``obs_count`` once
        per load, not every step."""
        if not self.obs_norm or self._obs_fitted or buffer is None or len(buffer) == 0:
            return
        if float(self.obs_count) > 0:  # loaded from a checkpoint
            self._obs_fitted = True
        else:
            self.fit_obs_norm(buffer)

    def normalize_obs(self, obs: Any) -> Any:
        """``(obs - mean) / (std + eps)`` with the dataset's statistics (``obs`` unchanged when
        observations are not normalised)."""
        if not self.obs_norm:
            return obs
        return (obs - self.obs_mean) * self.obs_scale

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict``; the next :meth:`fit_obs_norm_once` reads the loaded
        ``obs_count`` to tell whether the statistics came with the weights (else it fits
        them)."""
        self._obs_fitted = False
        return super().load_state_dict(state_dict, strict=strict, assign=assign)
