"""The entropy temperature of maximum-entropy actor-critics (SAC, REDQ, discrete SAC): a fixed
``alpha``, or one tuned so that the policy's entropy stays near a target (Haarnoja et al. 2018,
"Soft Actor-Critic Algorithms and Applications", section 5).

The tuned temperature minimises ``L(log_alpha) = mean(log_alpha * (H - target_entropy))``, where
``H`` is an entropy estimate per sample (``-log pi(a|s)`` for a sampled action, or the exact
entropy of a categorical policy). Its gradient is the mean of detached values, so
:meth:`EntropyTemperature.update` steps with it in closed form, without autograd: one small
kernel and no host synchronisation, which keeps the update capturable as a CUDA graph.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlblocks.algo._optim import OptimizerStep

__all__ = ["EntropyTemperature"]


class EntropyTemperature(nn.Module):
    """``alpha``: fixed at the configured value, or tuned towards ``target_entropy``.

    Own it as a submodule (its ``log_alpha`` is saved with the policy) and, when tuning,
    register its optimizer under a name so checkpoints keep the optimizer's state too::

        self.temperature = EntropyTemperature(c.alpha, target_entropy=-act_dim, tune=c.auto_alpha)
        self.to(self.device)
        self.temperature.attach(self, lr=c.alpha_lr)       # adds optimizer "alpha" when tuning
        ...
        self.temperature.update(-logp.detach())             # once per gradient step

    A fixed temperature reads back exactly as configured (``exp(log(alpha))`` can be a rounding
    off); a tuned one starts there.
    """

    def __init__(self, alpha: float, *, target_entropy: float, tune: bool) -> None:
        super().__init__()
        alpha = float(alpha)
        if not (alpha > 0.0 and math.isfinite(alpha)):
            raise ValueError(f"the entropy temperature must be a positive number, got {alpha}")
        self.tune = bool(tune)
        self.target_entropy = float(target_entropy)
        self.log_alpha = nn.Parameter(torch.tensor(alpha).log(), requires_grad=self.tune)
        self.register_buffer("_fixed_alpha", torch.tensor(alpha), persistent=False)
        self.optimizer_step: OptimizerStep | None = None

    def attach(
        self, policy: Any, lr: float, name: str = "alpha", **optimizer_kwargs: Any
    ) -> OptimizerStep | None:
        """Register the tuning optimizer with ``policy.add_optimizer(name, ...)`` (call it after
        the policy moved to its device); returns it, or None for a fixed temperature.
        ``optimizer_kwargs`` go to its :class:`OptimizerStep` (e.g. CrossQ's Adam ``betas``).

        Also lets ``policy`` load state dicts saved by rlblocks 0.1.0's SAC, REDQ and discrete
        SAC, which kept ``log_alpha`` on the policy itself."""
        if self.optimizer_step is not None:
            raise RuntimeError("this temperature's optimizer is already attached")
        own = next((n for n, m in policy.named_children() if m is self), None)
        if own is None:
            raise RuntimeError("attach the temperature to the policy that owns it as a submodule")
        policy._register_load_state_dict_pre_hook(_LegacyLogAlpha(f"{own}.log_alpha"))
        if not self.tune:
            return None
        self.optimizer_step = policy.add_optimizer(
            name, OptimizerStep([self.log_alpha], lr, **optimizer_kwargs)
        )
        return self.optimizer_step

    @property
    def alpha(self) -> torch.Tensor:
        """The current temperature, a 0-d tensor without gradient."""
        if not self.tune:
            return self._fixed_alpha
        return self.log_alpha.detach().exp()

    def forward(self) -> torch.Tensor:
        """Same as :attr:`alpha`."""
        return self.alpha

    def update(self, entropy: torch.Tensor, target: torch.Tensor | None = None) -> None:
        """One step of the temperature loss, given detached entropy estimates (one per sample);
        a no-op for a fixed temperature. Too little entropy raises alpha, too much lowers it.
        ``target``: a target per sample instead of :attr:`target_entropy` (e.g. under action
        masks, where the entropy a state allows depends on how many actions are legal)."""
        if self.optimizer_step is None:
            if self.tune:
                raise RuntimeError(
                    "a tuned temperature needs its optimizer: call temperature.attach(policy, lr) "
                    "in the policy's constructor"
                )
            return
        # d/d(log_alpha) mean(log_alpha * (H - target)) = mean(H - target)
        goal = self.target_entropy if target is None else target
        self.optimizer_step.step_with_grads([(entropy - goal).mean()])

    def extra_repr(self) -> str:
        mode = f"tuned, target_entropy={self.target_entropy:g}" if self.tune else "fixed"
        return f"alpha={float(self.alpha):g}, {mode}"


class _LegacyLogAlpha:
    """A load hook that renames a policy-level ``log_alpha`` to the temperature's key."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        old, new = f"{prefix}log_alpha", f"{prefix}{self.key}"
        if old in state_dict and new not in state_dict:
            state_dict[new] = state_dict.pop(old)
