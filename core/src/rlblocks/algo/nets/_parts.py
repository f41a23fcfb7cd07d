"""Your own networks as parts of an algorithm's: built from a module or a factory, checked once
with a forward pass on a sample of the spaces, adapted when they answer in the thesis' style.

A *part* (``encoder``, ``actor``, ``critic``, ``model``; what each algorithm takes is in its
spec's ``networks``) is given as an ``nn.Module`` or as a factory
``factory(observation_space, action_space) -> nn.Module``. The policy builds it with
:func:`build_part` and checks what it returns with :func:`check_output` before anything trains:
a misfit is one :class:`~rlblocks.contracts.ConfigError` naming the part, the shape it must
return and the shape it returned. A network whose ``forward`` returns ``(output, state)`` (the
thesis' ``forward(obs, state=None, info={}) -> (logits, state)``) is wrapped once, at that
check, in :class:`TupleOutput`, so nothing is probed per step.

User parts are submodules of the policy like built-in ones: its ``state_dict`` (checkpoints,
exact resume), ``.to(device)``, the NaN watch over its parameters and a captured CUDA-graph step
cover them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import gymnasium as gym
import torch
from torch import nn

from rlblocks.algo._distributions import Distribution
from rlblocks.algo.nets._encoders import obs_to_tensor
from rlblocks.contracts import ConfigError

__all__ = [
    "NetworkPart",
    "TupleOutput",
    "build_part",
    "check_output",
    "describe_part",
    "encoder_part",
    "fresh_copy",
    "part_device",
    "sample_observations",
]

NetworkPart: TypeAlias = nn.Module | Callable[[gym.Space, gym.Space], nn.Module]
"""A network a user brings: a module, or ``factory(observation_space, action_space)`` that
returns one."""

#: rows of the sample a part is checked on (2: a batch axis that no squeeze can hide)
_ROWS = 2


class TupleOutput(nn.Module):
    """A network that returns ``(output, state)`` (the thesis' style,
    ``forward(obs, state=None, info={}) -> (logits, state)``) as one that returns ``output``.

    The policies here keep no recurrent state for such a network: it is called with its inputs
    alone and its state is dropped."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, *inputs: Any) -> Any:
        return self.net(*inputs)[0]


def describe_part(given: Any) -> str:
    """``module:qualname`` of a part's class or factory, for a run's record (never imported); a
    ``functools.partial`` (a factory with its config's keyword arguments) names its function."""
    while isinstance(given, functools.partial):
        given = given.func
    source = type(given) if isinstance(given, nn.Module) else given
    module = getattr(source, "__module__", None) or "unknown"
    return f"{module}:{getattr(source, '__qualname__', type(source).__name__)}"


def build_part(
    name: str, given: Any, observation_space: gym.Space, action_space: gym.Space
) -> nn.Module:
    """The module of part ``name``: ``given`` itself when it is one, else what the factory
    ``given(observation_space, action_space)`` returns."""
    if isinstance(given, nn.Module):
        return given
    if not callable(given):
        raise ConfigError(
            f"the {name} must be a torch nn.Module or a factory (observation_space, "
            f"action_space) -> nn.Module, got {type(given).__name__} {given!r}"
        )
    built = given(observation_space, action_space)
    if not isinstance(built, nn.Module):
        raise ConfigError(
            f"the {name} factory {describe_part(given)} returned {type(built).__name__}, not a "
            "torch nn.Module; return the network itself"
        )
    return built


def fresh_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with its own freshly initialised parameters (every submodule with
    ``reset_parameters`` is reset): a second critic of an ensemble, or the critic's own copy of
    an encoder given as one module, must not start equal to the first."""
    clone = copy.deepcopy(module)
    for sub in clone.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()
    return clone


def part_device(module: nn.Module) -> torch.device:
    """Where ``module``'s parameters (or buffers) are; the CPU when it has none."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def sample_observations(space: gym.Space, device: torch.device | str = "cpu") -> Any:
    """A batch of two observations drawn from ``space`` as tensors (a dict of them for Dict
    and Tuple spaces), drawn with a generator of its own (no random stream moves)."""
    batched = gym.vector.utils.batch_space(space, _ROWS)
    batched.seed(0)
    return obs_to_tensor(batched.sample(), device)


def check_output(
    name: str,
    module: nn.Module,
    inputs: Sequence[Any],
    expected: Sequence[tuple[int, ...]],
    what: str,
    distribution_ok: bool = False,
) -> tuple[nn.Module, Any]:
    """Run ``module(*inputs)`` once (eval mode, no gradient, random streams untouched) and check
    its output: a tensor whose shape after the batch axis is one of ``expected`` (``-1``: any
    size), or a :class:`~rlblocks.algo.Distribution` with ``distribution_ok``. A tuple output is
    read as ``(output, state)`` and the module wrapped in :class:`TupleOutput`. Returns the
    module to use and the output. ``what`` says in words what the output is."""
    was_training = [m.training for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = module(*inputs)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"the {name} failed on a sample batch of {_ROWS} inputs of shape "
            f"{_shapes(inputs)} ({type(exc).__name__}: {first}); it must map those to {what}"
        ) from exc
    finally:
        for m, flag in zip(module.modules(), was_training, strict=True):
            m.training = flag
    if isinstance(out, tuple) and len(out) == 2:
        module, out = TupleOutput(module), out[0]
    if distribution_ok and isinstance(out, Distribution):
        return module, out
    if not isinstance(out, torch.Tensor):
        raise ConfigError(
            f"the {name} returned {type(out).__name__}, expected a tensor of shape "
            f"{_shape_text(expected)} ({what})"
        )
    shape = tuple(out.shape)
    fits = len(shape) >= 1 and shape[0] == _ROWS and any(
        len(shape) - 1 == len(want) and all(w in (-1, s) for w, s in zip(want, shape[1:]))
        for want in expected
    )
    if not fits:
        if shape[:1] == (_ROWS,):
            got = "[" + ", ".join(["B", *map(str, shape[1:])]) + "]"
        else:
            got = f"{list(shape)} (for a batch of B={_ROWS})"
        raise ConfigError(
            f"the {name}'s output has shape {got}, expected {_shape_text(expected)} ({what})"
        )
    return module, out


def _shape_text(expected: Sequence[tuple[int, ...]]) -> str:
    def one(want: tuple[int, ...]) -> str:
        return "[" + ", ".join(["B", *("D" if w == -1 else str(w) for w in want)]) + "]"

    return " or ".join(one(w) for w in expected)


def _shapes(inputs: Sequence[Any]) -> str:
    def shape(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return list(x.shape)
        if isinstance(x, dict):
            return {k: shape(v) for k, v in x.items()}
        return type(x).__name__

    shapes = [shape(x) for x in inputs]
    return str(shapes[0] if len(shapes) == 1 else shapes)


def encoder_part(
    encoder: nn.Module, observation_space: gym.Space, name: str = "encoder"
) -> nn.Module:
    """A user encoder checked on a sample of ``observation_space``: it must return features
    ``[B, D]``. Returns the module to use (wrapped when it answers ``(features, state)``) with
    ``out_dim = D`` set, which the built-in heads read; an ``out_dim`` the module declares
    itself must agree."""
    sample = sample_observations(observation_space, part_device(encoder))
    module, out = check_output(name, encoder, [sample], [(-1,)], "features")
    width = int(out.shape[1])
    declared = getattr(encoder, "out_dim", None)
    if declared is not None and int(declared) != width:
        raise ConfigError(
            f"the {name}'s out_dim is {declared} but its output has shape [B, {width}]; set "
            "out_dim to the feature width it returns (or leave it out)"
        )
    if module is not encoder or declared is None:
        module.out_dim = width
    return module
