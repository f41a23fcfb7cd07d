"""The optimizer step every algorithm takes: zero the gradients, backpropagate, clip the global
gradient norm, step, and follow a learning-rate schedule.

Written once here so that an algorithm's ``learn`` reads as its loss followed by
``self.critic_step(critic_loss)``; the step keeps its parameter list cached, because walking a
module tree on every gradient step costs more than the arithmetic of a small network.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["OptimizerStep", "make_optimizer"]

_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop,
    "sgd": torch.optim.SGD,
}


def make_optimizer(
    name: str, params: list[torch.Tensor], lr: float, **kwargs: Any
) -> torch.optim.Optimizer:
    """An optimizer by name (``adam``, ``adamw``, ``rmsprop``, ``sgd``). Adam-type optimizers use
    the fused kernel where the parameters' device supports it (one kernel for all tensors
    instead of one dispatch per tensor)."""
    try:
        cls = _OPTIMIZERS[name]
    except KeyError:
        raise ValueError(
            f"unknown optimizer {name!r}; choose one of {sorted(_OPTIMIZERS)}"
        ) from None
    if name in {"adam", "adamw"} and "fused" not in kwargs and params:
        kwargs["fused"] = params[0].device.type in {"cpu", "cuda"}
    return cls(params, lr=lr, **kwargs)


class OptimizerStep:
    """One optimizer over a fixed list of parameters, stepped with :meth:`step`.

    Args:
        params: the modules or tensors to optimise (tensors that do not require grad are left out).
        lr: the initial learning rate.
        optimizer: ``adam`` (default), ``adamw``, ``rmsprop`` or ``sgd``.
        max_grad_norm: clip the global gradient norm to this before each step (None: no clipping).
        lr_schedule: ``env_step -> lr``, applied by :meth:`set_env_step` (the trainer tells the
            policy the env step before every collect).
        **kwargs: passed to the optimizer (``eps``, ``betas``, ``weight_decay``, ...).
    """

    def __init__(
        self,
        params: nn.Module | Iterable[nn.Module | torch.Tensor],
        lr: float,
        *,
        optimizer: str = "adam",
        max_grad_norm: float | None = None,
        lr_schedule: Callable[[int], float] | None = None,
        **kwargs: Any,
    ) -> None:
        self.params = _param_list(params)
        if not self.params:
            raise ValueError("OptimizerStep got no parameters that require gradients")
        self.optim = make_optimizer(optimizer, self.params, lr, **kwargs)
        self.max_grad_norm = max_grad_norm
        self.lr_schedule = lr_schedule
        self.steps = 0

    def step(self, loss: torch.Tensor, retain_graph: bool = False) -> None:
        """``zero_grad -> loss.backward() -> clip -> step``. Returns nothing, so no value is
        copied to the host (an update stays free of device synchronisation)."""
        self.optim.zero_grad(set_to_none=True)
        loss.backward(retain_graph=retain_graph)
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.params, self.max_grad_norm, foreach=True)
        self.optim.step()
        self.steps += 1

    def step_with_grads(self, grads: list[torch.Tensor]) -> None:
        """Step with gradients computed in closed form (one per parameter), skipping autograd:
        e.g. SAC's temperature, whose loss gradient is a mean of detached values."""
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g.reshape(p.shape).to(p.dtype)
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.params, self.max_grad_norm, foreach=True)
        self.optim.step()
        self.steps += 1

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Inside, these parameters require no gradient: another network's loss that flows
        through them (an actor's loss through the critic) skips computing their gradients."""
        for p in self.params:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p in self.params:
                p.requires_grad_(True)

    def set_env_step(self, env_step: int) -> None:
        """Set the learning rate from the schedule (no-op without one)."""
        if self.lr_schedule is None:
            return
        lr = float(self.lr_schedule(env_step))
        for group in self.optim.param_groups:
            group["lr"] = lr

    @property
    def lr(self) -> float:
        """The current learning rate (of the first parameter group)."""
        return float(self.optim.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        """Set the learning rate of every parameter group (a hook's own schedule); a configured
        ``lr_schedule`` sets it again at the next collect."""
        if not value >= 0:
            raise ValueError(f"learning rate must be >= 0, got {value}")
        for group in self.optim.param_groups:
            group["lr"] = float(value)

    def state_dict(self) -> dict[str, Any]:
        return {"optim": self.optim.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optim.load_state_dict(state["optim"])
        self.steps = int(state.get("steps", 0))


def _param_list(params: nn.Module | Iterable[nn.Module | torch.Tensor]) -> list[torch.Tensor]:
    items = [params] if isinstance(params, nn.Module) else list(params)
    out: list[torch.Tensor] = []
    seen: set[int] = set()
    for item in items:
        tensors = item.parameters() if isinstance(item, nn.Module) else [item]
        for p in tensors:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out
