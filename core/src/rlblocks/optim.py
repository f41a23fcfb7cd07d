"""The optimizer step every algorithm takes: zero the gradients, backpropagate, clip the global
gradient norm, step, and follow a learning-rate schedule.

Written once here so that an algorithm's ``learn`` reads as its loss followed by
``self.critic_step(critic_loss)``; the step keeps its parameter list cached, because walking a
module tree on every gradient step costs more than the arithmetic of a small network.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["FiniteWatch", "OptimizerStep", "make_optimizer"]

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
        #: records every step's loss and gradient norm (see :class:`FiniteWatch`); None: off
        self._watch: FiniteWatch | None = None
        #: this optimizer's name in messages (``policy.add_optimizer`` gives it)
        self.name = "optimizer"
        # fused Adam/AdamW/SGD skip a step on the device when told so (``found_inf``)
        self._skips_on_device = bool(self.optim.defaults.get("fused"))

    def step(self, loss: torch.Tensor, retain_graph: bool = False) -> None:
        """``zero_grad -> loss.backward() -> clip -> step``. Returns nothing, so no value is
        copied to the host (an update stays free of device synchronisation)."""
        self.optim.zero_grad(set_to_none=True)
        loss.backward(retain_graph=retain_graph)
        self._clip_and_step(loss)

    def step_with_grads(self, grads: list[torch.Tensor]) -> None:
        """Step with gradients computed in closed form (one per parameter), skipping autograd:
        e.g. SAC's temperature, whose loss gradient is a mean of detached values."""
        for p, g in zip(self.params, grads, strict=True):
            p.grad = g.reshape(p.shape).to(p.dtype)
        self._clip_and_step(None)

    def _clip_and_step(self, loss: torch.Tensor | None) -> None:
        norm = None
        if self.max_grad_norm is not None:
            norm = nn.utils.clip_grad_norm_(self.params, self.max_grad_norm, foreach=True)
        if self._watch is None or self._watch.record(self, loss, norm):
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


class FiniteWatch:
    """Watches a policy's optimizer steps and parameters for NaN and infinite values, with one
    host copy per :meth:`check` and no torch operation of its own per step.

    Each watched :class:`OptimizerStep` hands over its loss and, when it clips, the global
    gradient norm it clipped with (non-finite exactly when some gradient is); :meth:`check`
    stacks them with one sum per parameter tensor and reads them at once. A gradient that is
    not finite also makes the parameters it updates non-finite (every optimizer's update
    carries it), so without clipping the parameters report it, at the next check.

    With ``skip`` each step computes its gradient norm and whether its loss and gradients are
    finite, and a step where they are not is not applied: fused optimizers (Adam, AdamW) skip
    it on the device, as mixed-precision gradient scaling does, others after reading the flag.

    The trainer makes one (:meth:`rlblocks.policy.BasePolicy.watch_finite`), calls
    :meth:`end_update` after each ``policy.update`` and :meth:`check` once per iteration,
    before anything is tested or checkpointed.
    """

    def __init__(
        self,
        steps: Mapping[str, OptimizerStep],
        parameters: Iterable[tuple[str, torch.Tensor]],
        skip: bool = False,
    ) -> None:
        self.skip = skip
        self._steps = dict(steps)
        named = list(parameters)
        self._param_names = [name for name, _ in named]
        self._params = [p for _, p in named]
        self._owner = {id(p): name for name, step in self._steps.items() for p in step.params}
        # per optimizer step since the last check: (loss or None, gradient norm or None, the
        # optimizer, its step count, the update's index); with ``skip`` the first entry is the
        # step's skip flag (1.0: skipped) and the second None
        self._pending: list[tuple[Any, Any, OptimizerStep, int, int]] = []
        self._update_steps: list[int] = []  # gradient steps of each update since the last check
        #: optimizer steps skipped (``skip``) since the last :meth:`pop_skipped`
        self.skipped = 0
        self.attach()

    def attach(self) -> None:
        """(Re)start watching the optimizer steps, from a clean slate."""
        self._pending.clear()
        self._update_steps.clear()
        for name, step in self._steps.items():
            step.name = name
            step._watch = self

    def detach(self) -> None:
        """Stop watching (the optimizer steps run exactly as unwatched ones)."""
        for step in self._steps.values():
            if step._watch is self:
                step._watch = None
                step.optim.__dict__.pop("found_inf", None)
        self._pending.clear()
        self._update_steps.clear()

    def record(
        self, step: OptimizerStep, loss: torch.Tensor | None, norm: torch.Tensor | None
    ) -> bool:
        """Keep one optimizer step's loss (None for closed-form gradients) and gradient norm
        (None without clipping); whether the caller should apply the step."""
        update = len(self._update_steps)
        if not self.skip:
            self._pending.append((loss, norm, step, step.steps, update))
            return True
        if norm is None:
            grads = [p.grad for p in step.params if p.grad is not None]
            norm = nn.utils.get_total_norm(grads, foreach=True)
        with torch.no_grad():
            total = norm if loss is None else (loss.reshape(()) if loss.dim() else loss) + norm
            # 0 * x is 0 for a finite x and NaN otherwise: a flag of 0.0 or 1.0, on the device
            flag = torch.nan_to_num(total * 0, nan=1.0).to(torch.float32)
        self._pending.append((flag, None, step, step.steps, update))
        if step._skips_on_device:
            step.optim.found_inf = flag
            return True
        return not bool(flag)

    def end_update(self, gradient_steps: int = 1) -> None:
        """One ``policy.update`` ended; it counted ``gradient_steps`` gradient steps."""
        self._update_steps.append(gradient_steps)

    def pop_skipped(self) -> int:
        """Optimizer steps skipped since the last call."""
        skipped, self.skipped = self.skipped, 0
        return skipped

    def check(self, gradient_step: int) -> str:
        """Read what was recorded since the last check (one host copy): "" when every loss,
        gradient and parameter is finite, else what is not and at which gradient step
        (``gradient_step`` is the trainer's count now). With ``skip``, skipped steps are counted
        in :attr:`skipped` instead; parameters are always reported."""
        values: list[torch.Tensor] = []
        where: list[tuple[str, int]] = []  # what each value is, and its pending index
        for i, (loss, norm, *_) in enumerate(self._pending):
            if loss is not None:
                values.append(loss.reshape(()) if loss.dim() else loss)
                where.append(("skip" if self.skip else "loss", i))
            if norm is not None:
                values.append(norm)
                where.append(("gradients", i))
        with torch.no_grad():
            # a parameter tensor's sum is NaN or infinite when one of its entries is (or,
            # rarely, when it overflows: the parameters are looked at one by one to report them)
            values += [p.sum() for p in self._params]
            read = torch.stack(values).tolist() if values else []
        recorded, sums = read[: len(where)], read[len(where) :]
        problem = ""
        if self.skip:
            self.skipped += int(sum(recorded))
        else:
            bad = next((j for j, v in enumerate(recorded) if not math.isfinite(v)), None)
            if bad is not None:
                problem = self._describe(*where[bad], recorded[bad], gradient_step)
        if not problem and not all(map(math.isfinite, sums)):
            problem = self._describe_parameters(gradient_step)
        self._pending.clear()
        self._update_steps.clear()
        return problem

    def _describe(self, what: str, index: int, value: float, gradient_step: int) -> str:
        _, _, step, count, update = self._pending[index]
        first = next(e for e in self._pending if e[4] == update and e[2] is step)
        in_update = self._update_steps[update] if update < len(self._update_steps) else 1
        before = gradient_step - sum(self._update_steps) + sum(self._update_steps[:update])
        at = before + min(count - first[3], in_update - 1) + 1
        if what == "loss":
            return f"the loss of optimizer {step.name!r} is {value} at gradient step {at}"
        return (
            f"the gradients of optimizer {step.name!r} are not finite (global norm {value}) "
            f"at gradient step {at}"
        )

    def _describe_parameters(self, gradient_step: int) -> str:
        pairs = zip(self._param_names, self._params, strict=True)
        bad = [(n, p) for n, p in pairs if not bool(torch.isfinite(p).all())]
        if not bad:  # a sum overflowed; every entry is finite
            return ""
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        names = ", ".join(n for n, _ in bad[:3]) + more
        owners = sorted({self._owner.get(id(p), "") for _, p in bad} - {""})
        by = f" (optimizer {', '.join(map(repr, owners))})" if owners else ""
        since = gradient_step - sum(self._update_steps) + 1
        cause = (
            "steps with non-finite losses or gradients were skipped, so an update outside the "
            "optimizers or one that overflowed"
            if self.skip
            else "every loss was finite, so a gradient (or an update that overflowed)"
        )
        return (
            f"parameters {names}{by} are not finite after gradient step {gradient_step}; "
            f"{cause} made them so in gradient steps {since}-{gradient_step}"
        )


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
