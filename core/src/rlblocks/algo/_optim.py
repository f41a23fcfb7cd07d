"""The optimizer step every algorithm takes: zero the gradients, backpropagate, clip the global
gradient norm, step, and follow a learning-rate schedule.

Written once here so that an algorithm's ``learn`` reads as its loss followed by
``self.critic_step(critic_loss)``; the step keeps its parameter list cached, because walking a
module tree on every gradient step costs more than the arithmetic of a small network.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.optim.optimizer as _optimizer_module
from torch import nn

__all__ = ["FiniteWatch", "OptimizerStep", "make_optimizer", "optimizers_deferred"]

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


# set by optimizers_deferred(): OptimizerSteps made meanwhile build their torch optimizer on
# first use
_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rlblocks_optimizers_deferred", default=False
)


@contextlib.contextmanager
def optimizers_deferred() -> Iterator[None]:
    """Inside, every :class:`OptimizerStep` made builds its torch optimizer on first use (a
    step, ``.optim``, ``state_dict``) instead of at once, and keeps a loaded optimizer state
    until then.

    Why: building the first torch optimizer of a process imports torch's compiler stack
    (``torch._dynamo``, about 2 s on a small CPU), which an agent loaded only to act, evaluate
    or record never uses (:func:`rlblocks.load` makes its policy inside this). A policy made
    here still trains exactly as one made outside it."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


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
        if optimizer not in _OPTIMIZERS:
            make_optimizer(optimizer, self.params, lr)  # raises, naming the choices
        self.max_grad_norm = max_grad_norm
        self.lr_schedule = lr_schedule
        self.steps = 0
        #: records every step's loss and gradient norm (see :class:`FiniteWatch`); None: off
        self._watch: FiniteWatch | None = None
        #: this optimizer's name in messages (``policy.add_optimizer`` gives it)
        self.name = "optimizer"
        # the fused Adam kernel's arguments, gathered once its state exists (see _FusedAdam)
        self._fused: _FusedAdam | None = None
        # whether every parameter has one device and dtype (see _clip_grad_norm); None: not
        # looked at yet
        self._one_kind: bool | None = None
        # what builds the torch optimizer, and a state loaded before it was built
        self._recipe: tuple[str, float, dict[str, Any]] | None = (optimizer, lr, kwargs)
        self._pending_state: Mapping[str, Any] | None = None
        if not _DEFERRED.get():
            self._build()

    def _build(self) -> None:
        """Make the torch optimizer (``self.optim``) and what is read off it once."""
        assert self._recipe is not None
        optimizer, lr, kwargs = self._recipe
        self._recipe = None
        self.optim = make_optimizer(optimizer, self.params, lr, **kwargs)
        # fused Adam/AdamW/SGD skip a step on the device when told so (``found_inf``)
        self._skips_on_device = bool(self.optim.defaults.get("fused"))
        self._fused_ok = _FusedAdam.applies(self.optim)
        if self._pending_state is not None:
            pending, self._pending_state = self._pending_state, None
            self.optim.load_state_dict(pending)

    def __getattr__(self, name: str) -> Any:
        # reached only for attributes not set yet: the optimizer of a deferred step
        if name in {"optim", "_skips_on_device", "_fused_ok"} and self.__dict__.get("_recipe"):
            self._build()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def step(self, loss: torch.Tensor, retain_graph: bool = False) -> None:
        """``zero_grad -> loss.backward() -> clip -> step``. Returns nothing, so no value is
        copied to the host (an update stays free of device synchronisation)."""
        for p in self.params:  # zero_grad(set_to_none=True), without its per-call overhead
            p.grad = None
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
            norm = self._clip_grad_norm(self.max_grad_norm)
        if self._watch is None or self._watch.record(self, loss, norm):
            self._optimizer_step()
        self.steps += 1

    def _clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """``nn.utils.clip_grad_norm_(params, max_norm, foreach=True)``, the same arithmetic
        op for op; when every gradient is a dense tensor on one device with one dtype (nearly
        always) it skips that function's per-call grouping of the tensors by device and dtype,
        half of its cost for a small network."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if self._one_kind is None:
            kinds = {(p.device, p.dtype) for p in self.params}
            self._one_kind = len(kinds) == 1 and hasattr(torch, "_foreach_norm")
        if not (grads and self._one_kind) or any(g.is_sparse for g in grads):
            return nn.utils.clip_grad_norm_(self.params, max_norm, foreach=True)
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef)
        return total

    def _optimizer_step(self) -> None:
        """``optim.step()``; fused Adam/AdamW call their kernel directly once their state
        exists, which is the same arithmetic without the 50-100 us of Python that
        ``Optimizer.step`` spends regrouping the same tensors on every call (a large share of
        a small network's gradient step)."""
        fused = self._fused
        if fused is not None and fused.step():
            return
        self.optim.step()
        if self._fused_ok and (fused is None or fused.stale()):
            self._fused = _FusedAdam.build(self.optim)

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
        if "optim" in self.__dict__:
            self.optim.load_state_dict(state["optim"])
        else:  # deferred: checked now as torch checks it, loaded when the optimizer is built
            groups = state["optim"]["param_groups"]
            if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
                raise ValueError(
                    f"the saved state of optimizer {self.name!r} has "
                    f"{[len(g['params']) for g in groups]} parameters per group; this one has "
                    f"one group of {len(self.params)}"
                )
            self._pending_state = state["optim"]
        self.steps = int(state.get("steps", 0))


class _FusedAdam:
    """The arguments of ``torch._fused_adam_`` / ``_fused_adamw_`` for one optimizer, per
    parameter group, so that a step is the kernel call that ``torch.optim.Adam(fused=True)``
    makes itself (steps counted first, ``found_inf`` honoured, then un-counted), minus its
    per-call regrouping. :meth:`step` declines (the caller then runs ``optim.step()``) whenever
    the optimizer's groups or state were replaced, a gradient is missing, or step hooks are
    registered, so it is never a different update."""

    _KINDS = (torch.optim.Adam, torch.optim.AdamW)

    def __init__(self, optim: torch.optim.Optimizer, plans: list[tuple[Any, ...]]) -> None:
        self.optim = optim
        self.groups = optim.param_groups
        self.state = optim.state
        self.n_groups = len(optim.param_groups)
        self.plans = plans

    @classmethod
    def applies(cls, optim: torch.optim.Optimizer) -> bool:
        """Whether ``optim`` is a fused Adam/AdamW of the kind the direct call reproduces."""
        if type(optim) not in cls._KINDS or not hasattr(torch, "_fused_adam_"):
            return False
        return all(
            g.get("fused")
            and not g.get("amsgrad")
            and not g.get("maximize")
            and not g.get("capturable")
            and not g.get("differentiable")
            and not isinstance(g.get("lr"), torch.Tensor)
            for g in optim.param_groups
        )

    @classmethod
    def build(cls, optim: torch.optim.Optimizer) -> _FusedAdam | None:
        """The plan of an optimizer whose every parameter has its state (after one step), or
        None when some group mixes devices or dtypes, or has complex or stateless parameters."""
        if not cls.applies(optim):
            return None
        plans = []
        for group in optim.param_groups:
            params = list(group["params"])
            states = [optim.state.get(p) for p in params]
            if not params or any(not s or "exp_avg" not in s for s in states):
                return None
            kinds = {(p.device, p.dtype, p.is_complex()) for p in params}
            if len(kinds) != 1 or next(iter(kinds))[2]:
                return None
            kernel = (
                torch._fused_adamw_ if group.get("decoupled_weight_decay") else torch._fused_adam_
            )
            plans.append((
                group,
                params,
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [s["step"] for s in states],
                kernel,
                params[0].device,
            ))  # fmt: skip
        return cls(optim, plans)

    def stale(self) -> bool:
        """Whether the optimizer's groups or state were replaced since the plan was made."""
        optim = self.optim
        return (
            optim.param_groups is not self.groups
            or optim.state is not self.state
            or len(self.groups) != self.n_groups
        )

    def step(self) -> bool:
        """One Adam step of every group; False (nothing done) when the direct call would not
        be exact."""
        optim = self.optim
        if (
            self.stale()
            or not self.applies(optim)  # a group's flags were changed since
            or optim._optimizer_step_pre_hooks
            or optim._optimizer_step_post_hooks
            or _optimizer_module._global_optimizer_pre_hooks
            or _optimizer_module._global_optimizer_post_hooks
            or getattr(optim, "grad_scale", None) is not None
            or "step" in optim.__dict__  # step wrapped by someone (an LR scheduler's counter)
        ):
            return False
        grads_per_group = []
        for _group, params, *_ in self.plans:
            grads = [p.grad for p in params]
            if any(g is None or g.is_sparse for g in grads):
                return False
            grads_per_group.append(grads)
        found_inf = getattr(optim, "found_inf", None)
        with torch.no_grad():
            for (group, params, exp_avgs, exp_avg_sqs, steps, kernel, device), grads in zip(
                self.plans, grads_per_group, strict=True
            ):
                inf = None if found_inf is None else found_inf.to(device, non_blocking=True)
                beta1, beta2 = group["betas"]
                torch._foreach_add_(steps, 1)
                kernel(
                    params, grads, exp_avgs, exp_avg_sqs, [], steps,
                    amsgrad=False, lr=group["lr"], beta1=float(beta1), beta2=float(beta2),
                    weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
                    grad_scale=None, found_inf=inf,
                )  # fmt: skip
                if inf is not None:
                    torch._foreach_sub_(steps, [inf] * len(steps))
        return True


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

    The trainer makes one (:meth:`rlblocks.algo.BasePolicy.watch_finite`), calls
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
