#!/usr/bin/env python
"""Do rlblocks and Tianshou take the same gradient steps? DDPG, TD3 and SAC from the same start.

The MuJoCo table (``mujoco_benchmark.py``) compares final returns over seeds; a gap there is
either seed noise or a difference in what the libraries compute. This script separates the two
for the learner: it builds both libraries' learner for a MuJoCo task's spaces with the settings
the table uses, copies rlblocks' initial weights into Tianshou's networks (targets included),
fills both replay buffers with the same transitions (random actions in the real env, so
terminations are in them), and feeds both the same sampled rows for ``--steps`` gradient steps
through each library's own update call (``policy.update(256, buffer)`` and
``algorithm.update(buffer, 256)``; only the sampler's row choice is replaced, by one shared
draw). Each library computes its own TD targets, losses, optimizer steps and target updates.
Random draws inside a step (TD3's target smoothing noise, SAC's reparameterised actions) come
from the same torch seed in both, and are the same numbers where both draw the same shapes in
the same order.

Before every step Tianshou is re-set to rlblocks' weights and Adam moments (``--free-running``
leaves them apart after the start), so each step compares the two updates from one point of
rlblocks' path. Printed at a few step counts, per network: the worst step so far of
``|g_rlblocks - g_Tianshou| / |g_rlblocks|``, the gradients each library's Adam step took (read
back from Adam's first moments), and for the targets the largest weight difference after the
step relative to the largest weight; and both critic losses. The same arithmetic differs by
float rounding (about 1e-7 to 1e-5: the libraries' matrix products, Adam kernels and reductions
are not the same kernels); a different update (a missed termination mask, another loss or
target) shows from the first step at the scale of the gradient itself (``--rlblocks-set
gamma=0.98`` shows what that looks like).

Differences found are by design, and a flag removes each one from rlblocks' side to show it is
the only one: TD3's smoothed target action is clipped to the action bounds in rlblocks, as in
the TD3 paper's reference code, not in Tianshou 2.0.1 (``--td3-unclipped-target``: TD3's
``target_action_clip=False``), and its
delayed actor first steps at the second gradient step, as in the paper (Tianshou's at the
first; the script sets Tianshou's counter to rlblocks' phase); SAC's log-probability is the
same mathematics written without two roundings (see :func:`tianshou_log_prob`;
``--sac-tianshou-log-prob``).

Run (in .venv-bench, see README.md): ``python contrib/benchmarks/update_equivalence.py --algo
ddpg|td3|sac --env Hopper-v5 [--steps 2000] [--adam-like-tianshou]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHECKPOINTS = (1, 2, 10, 100, 1000, 10_000, 100_000)


def random_transitions(env_id: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` transitions of uniformly random actions in ``env_id`` (resets after each end)."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    keys = ("obs", "act", "rew", "terminated", "truncated", "obs_next")
    rows: dict[str, list[Any]] = {k: [] for k in keys}
    for _ in range(n):
        act = env.action_space.sample()
        obs_next, rew, terminated, truncated, _ = env.step(act)
        for key, value in zip(rows, (obs, act, rew, terminated, truncated, obs_next)):
            rows[key].append(value)
        obs = env.reset()[0] if terminated or truncated else obs_next
    env.close()
    out = {k: np.asarray(v) for k, v in rows.items()}
    for key in ("obs", "act", "obs_next", "rew"):
        out[key] = out[key].astype(np.float32)
    return out


def build(args: argparse.Namespace, obs_space: Any, act_space: Any) -> tuple[Any, Any]:
    """rlblocks' policy and Tianshou's algorithm with the table's settings, same weights."""
    import torch
    from mujoco_benchmark import TIANSHOU_EXAMPLES, _tianshou_algorithm

    import rlblocks
    from rlblocks.run import parse_override

    s = dict(TIANSHOU_EXAMPLES[args.algo])
    fields = dict(
        hidden_sizes=s["hidden_sizes"], actor_lr=s["actor_lr"], critic_lr=s["critic_lr"],
        gamma=s["gamma"], tau=s["tau"], n_step=s["n_step"], cuda_graph=False,
    )  # fmt: skip
    if args.algo == "td3":
        fields.update(
            policy_noise=s["policy_noise"], noise_clip=s["noise_clip"],
            policy_delay=s["update_actor_freq"],
        )  # fmt: skip
    if args.algo == "sac":
        fields.update(auto_alpha=s["auto_alpha"], alpha=s["alpha"])
    for item in args.rlblocks_set:  # read as `rlblocks train --set algo.KEY=VALUE` reads it
        path, value = parse_override(item)
        fields[".".join(path)] = value
    torch.manual_seed(args.seed)
    ours = rlblocks.make_policy(args.algo, obs_space, act_space, device="cpu", **fields)
    if args.adam_like_tianshou:
        from rlblocks.algo import OptimizerStep

        ours.actor_step = ours.add_optimizer(
            "actor", OptimizerStep(ours.actor, s["actor_lr"], fused=False)
        )
        ours.critic_step = ours.add_optimizer(
            "critic", OptimizerStep(ours.critic, s["critic_lr"], fused=False)
        )

    class _Env:
        action_space = act_space

    theirs = _tianshou_algorithm(args.algo, s, _Env(), obs_space.shape, act_space.shape, 1)
    for pairs in network_pairs(args.algo, ours, theirs)[0].values():
        sync(pairs, None)
    return ours, theirs


def network_pairs(
    algo: str, ours: Any, theirs: Any
) -> tuple[dict[str, list[tuple[Any, Any, Any]]], dict[str, tuple[Any, Any]]]:
    """Each network's paired parameters (see :func:`paired_params`) by name, and each trained
    network's pair of optimizers (rlblocks', Tianshou's)."""
    if algo == "sac":
        actor = sac_actor_pairs(ours.actor, theirs.policy.actor)
    else:
        actor = paired_params(ours.actor, theirs.policy.actor)
    nets = {"actor": actor, "critic": paired_params(ours.critic, theirs.critic, 0)}
    if algo != "sac":  # SAC has no target actor
        nets["actor target"] = paired_params(ours.actor_target.net, theirs.actor_old.module)
    nets["critic target"] = paired_params(ours.critic_target.net, theirs.critic_old.module, 0)
    optims = {
        "actor": (ours.actor_step.optim, theirs.policy_optim._optim),
        "critic": (ours.critic_step.optim, theirs.critic_optim._optim),
    }
    if algo != "ddpg":
        nets["critic 2"] = paired_params(ours.critic, theirs.critic2, 1)
        nets["critic 2 target"] = paired_params(
            ours.critic_target.net, theirs.critic2_old.module, 1
        )
        optims["critic 2"] = (ours.critic_step.optim, theirs.critic2_optim._optim)
    return nets, optims


def sac_actor_pairs(ours: Any, theirs: Any) -> list[tuple[Any, Any, Any]]:
    """rlblocks' SAC actor (an MLP body, then one head for mean and log-std) against
    Tianshou's (a preprocessing net, then a mean head and a log-std head)."""
    from torch import nn

    def linear(module: Any) -> Any:
        return next(m for m in module.modules() if isinstance(m, nn.Linear))

    a = ours.act_dim
    head, mu, sigma = ours.head, linear(theirs.mu), linear(theirs.sigma)
    return [
        *paired_params(ours.body, theirs.preprocess),
        (head.weight, mu.weight, lambda t: t[:a]),
        (head.bias, mu.bias, lambda t: t[:a]),
        (head.weight, sigma.weight, lambda t: t[a:]),
        (head.bias, sigma.bias, lambda t: t[a:]),
    ]


def tianshou_log_prob(actor: Any) -> Any:
    """rlblocks' SAC actor's forward with the log-probability computed as Tianshou computes
    it: the Gaussian's ``log_prob`` of the pre-tanh sample ``u = mean + std * noise`` (which
    subtracts ``mean`` from ``u`` again) and the tanh correction ``log(1 - tanh(u)^2 + eps)``
    with float32's eps. rlblocks writes the same quantity from the drawn noise itself,
    ``-noise^2 / 2 - log std - log(2 pi) / 2``, and the exact correction ``2 (log 2 - u -
    softplus(-2u))``: the same mathematics, without the two roundings, which matter where the
    policy saturates (a small std next to a large mean, ``tanh(u)`` at 1 in float32)."""
    import torch

    eps = float(np.finfo(np.float32).eps)

    def forward(obs: Any, deterministic: bool = False, with_log_prob: bool = True) -> Any:
        mean, log_std = actor.distribution(obs)
        std = log_std.exp()
        noise = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
        u = mean + std * noise
        act = torch.tanh(u)
        if not with_log_prob:
            return act, None
        log_prob = torch.distributions.Normal(mean, std).log_prob(u).sum(-1)
        return act, log_prob - torch.log(1.0 - act.pow(2) + eps).sum(-1)

    return forward


def paired_params(ours: Any, theirs: Any, member: int = 0) -> list[tuple[Any, Any, Any]]:
    """``(rlblocks parameter, Tianshou parameter, to_theirs)`` for each weight and bias in
    layer order, ``to_theirs`` turning a tensor in rlblocks' layout (of that parameter, or of
    its optimizer state) into Tianshou's; of an rlblocks critic ensemble, member ``member``
    (Tianshou keeps each critic as a network of its own)."""
    from torch import nn

    from rlblocks.algo.nets import EnsembleLinear

    def layers(module: Any) -> list[Any]:
        return [m for m in module.modules() if isinstance(m, (nn.Linear, EnsembleLinear))]

    pairs = []
    for mine, their in zip(layers(ours), layers(theirs), strict=True):
        if isinstance(mine, EnsembleLinear):
            pairs += [
                (mine.weight, their.weight, lambda t: t[member].T),
                (mine.bias, their.bias, lambda t: t[member, 0]),
            ]
        else:
            pairs += [(mine.weight, their.weight, _same), (mine.bias, their.bias, _same)]
    for mine, their, conv in pairs:
        if conv(mine).shape != their.shape:
            raise ValueError(f"layer shapes differ: {tuple(mine.shape)} and {tuple(their.shape)}")
    return pairs


def _same(t: Any) -> Any:
    return t


def sync(pairs: list[tuple[Any, Any, Any]], optims: tuple[Any, Any] | None) -> None:
    """Set Tianshou's parameters (and, with ``optims``, its Adam moments and step counts) to
    rlblocks' exactly."""
    import torch

    with torch.no_grad():
        for mine, their, conv in pairs:
            their.copy_(conv(mine))
            if optims is None:
                continue
            state = optims[0].state.get(mine)
            if not state:
                optims[1].state.pop(their, None)
                continue
            optims[1].state[their] = {
                "step": state["step"].detach().clone().cpu().reshape(()),
                "exp_avg": conv(state["exp_avg"]).detach().clone(),
                "exp_avg_sq": conv(state["exp_avg_sq"]).detach().clone(),
            }


def first_moments(pairs: list[tuple[Any, Any, Any]], optim: Any) -> list[Any]:
    """Adam's first moment of each rlblocks parameter (in Tianshou's layout; zeros before the
    first step)."""
    import torch

    out = []
    for mine, _, conv in pairs:
        state = optim.state.get(mine)
        m = state["exp_avg"] if state else torch.zeros_like(mine)
        out.append(conv(m).detach().clone())
    return out


def grad_gap(
    pairs: list[tuple[Any, Any, Any]], optims: tuple[Any, Any], m_before: list[Any]
) -> float:
    """|g_rlblocks - g_Tianshou| / |g_rlblocks| (2-norms over a network) of the gradients
    each library's Adam step just took, read back from the first moments, which started
    equal: ``g = (m_after - beta1 m_before) / (1 - beta1)``. Comparing gradients rather than
    steps keeps out Adam's division of near-zero gradients by their own size, which turns a
    rounding-level difference of a gradient of 1e-9 into a step difference of lr / 2."""
    import torch

    ours, theirs = optims
    beta1 = ours.param_groups[0]["betas"][0]
    diff = norm = 0.0
    for (mine, their, conv), m0 in zip(pairs, m_before, strict=True):
        m_ours = ours.state.get(mine, {}).get("exp_avg")
        m_theirs = theirs.state.get(their, {}).get("exp_avg")
        g_ours = (conv(m_ours) - beta1 * m0) / (1 - beta1) if m_ours is not None else 0 * m0
        g_theirs = (m_theirs - beta1 * m0) / (1 - beta1) if m_theirs is not None else 0 * m0
        diff += float(torch.sum((g_ours - g_theirs) ** 2))
        norm += float(torch.sum(g_ours**2))
    return (diff / norm) ** 0.5 if norm else float(diff > 0)


def value_gap(pairs: list[tuple[Any, Any, Any]]) -> float:
    """max |rlblocks - Tianshou| / max |Tianshou| over a network's parameters."""
    gap = max(float((conv(m).detach() - t.detach()).abs().max()) for m, t, conv in pairs)
    return gap / max(float(t.detach().abs().max()) for _, t, _ in pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("ddpg", "td3", "sac"), default="ddpg")
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=2_000, help="gradient steps")
    parser.add_argument("--transitions", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--adam-like-tianshou", action="store_true",
        help="rlblocks takes PyTorch's default (unfused) Adam kernel, as Tianshou does",
    )  # fmt: skip
    parser.add_argument(
        "--free-running", action="store_true",
        help="do not re-synchronise Tianshou to rlblocks before each step: both run on from "
        "the same start and drift apart by rounding (ReLU kinks and Adam amplify last-bit "
        "differences), which shows how fast trajectories separate",
    )  # fmt: skip
    parser.add_argument(
        "--rlblocks-set", action="append", default=[], metavar="KEY=VALUE",
        help="change one of rlblocks' settings (e.g. gamma=0.98): a check that the comparison "
        "sees a different update",
    )  # fmt: skip
    parser.add_argument(
        "--td3-unclipped-target", action="store_true",
        help="TD3: rlblocks' smoothed target action left unclipped, as Tianshou leaves it (to "
        "show that this is the one difference in the update)",
    )  # fmt: skip
    parser.add_argument(
        "--sac-tianshou-log-prob", action="store_true",
        help="SAC: rlblocks' log-probability computed as Tianshou computes it (to show that "
        "this is the one difference in the update)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    import gymnasium as gym
    import torch
    from tianshou.algorithm.algorithm_base import policy_within_training_step
    from tianshou.data import Batch
    from tianshou.data import ReplayBuffer as TianshouBuffer

    from rlblocks.replay import ReplayBuffer

    torch.set_num_threads(1)
    env = gym.make(args.env)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if not np.allclose(act_space.low, -1.0) or not np.allclose(act_space.high, 1.0):
        raise SystemExit(f"{args.env}: pick an env whose actions are in [-1, 1] (no rescaling)")
    data = random_transitions(args.env, args.transitions, args.seed)
    n = args.transitions
    ours, theirs = build(args, obs_space, act_space)
    if args.td3_unclipped_target:
        if args.algo != "td3":
            raise SystemExit("--td3-unclipped-target is for --algo td3")
        ours.config.target_action_clip = False  # read at every target computation
    if args.sac_tianshou_log_prob:
        if args.algo != "sac":
            raise SystemExit("--sac-tianshou-log-prob is for --algo sac")
        ours.actor.forward = tianshou_log_prob(ours.actor)
    nets, optims = network_pairs(args.algo, ours, theirs)

    buf = ReplayBuffer(n)
    buf.extend(data, env_ids=[0] * n)
    tbuf = TianshouBuffer(n)
    for i in range(n):
        tbuf.add(Batch(**{k: v[i] for k, v in data.items()}, info={}))
    rows = np.random.default_rng(args.seed + 1)
    drawn: dict[str, np.ndarray] = {}
    buf.sample_index = lambda size: drawn["idx"]  # type: ignore[method-assign]
    tbuf.sample = lambda size: (tbuf[drawn["idx"]], drawn["idx"])  # type: ignore[method-assign]
    ours.train()
    theirs.train()

    mode = (
        "free-running from the same start"
        if args.free_running
        else ("Tianshou re-set to rlblocks' weights and Adam state before every step")
    )
    print(
        f"{args.algo} on {args.env} spaces: {n} random-action transitions "
        f"({int(data['terminated'].sum())} terminations, {int(data['truncated'].sum())} time "
        f"limits), batch {args.batch_size}, {mode}; rlblocks' Adam kernel: "
        f"{'unfused (as Tianshou)' if args.adam_like_tianshou else 'fused'}"
        + (f"; rlblocks changed: {', '.join(args.rlblocks_set)}" if args.rlblocks_set else "")
        + ("; rlblocks' TD3 target unclipped" if args.td3_unclipped_target else "")
        + ("; rlblocks' SAC log-prob as Tianshou's" if args.sac_tianshou_log_prob else "")
    )
    if args.free_running:
        print("gap = max |rlblocks - Tianshou| / max |Tianshou| over a network's weights")
    else:
        print(
            "gap = the worst step so far of |rlblocks' gradient - Tianshou's| / |rlblocks' "
            "gradient| (2-norms over the network); targets: max |rlblocks - Tianshou| / "
            "max |Tianshou| of the weights after the step"
        )
    names = list(nets)
    print("| step | " + " | ".join(names) + " | critic loss rlblocks | Tianshou |")
    print("| --- " * (len(names) + 3) + "|")
    checkpoints = [c for c in CHECKPOINTS if c < args.steps] + [args.steps]
    worst = dict.fromkeys(names, 0.0)
    for step in range(1, args.steps + 1):
        drawn["idx"] = rows.integers(0, n, args.batch_size)
        if not args.free_running:
            for name, pairs in nets.items():
                sync(pairs, optims.get(name))
            if args.algo == "td3":  # the actor's phase: rlblocks' count, Tianshou's alike
                theirs._cnt = ours.gradient_steps + 1
        m_before = {name: first_moments(nets[name], pair[0]) for name, pair in optims.items()}
        torch.manual_seed(args.seed * 1_000_003 + step)  # TD3's smoothing noise, both alike
        stats = ours.update(args.batch_size, buf)
        torch.manual_seed(args.seed * 1_000_003 + step)
        with policy_within_training_step(theirs.policy):
            tstats = theirs.update(tbuf, args.batch_size)
        for name, pairs in nets.items():
            if args.free_running or "target" in name:
                gap = value_gap(pairs)
            else:
                gap = grad_gap(pairs, optims[name], m_before[name])
            worst[name] = gap if args.free_running else max(worst[name], gap)
        if step in checkpoints:
            ts_loss = getattr(tstats, "critic_loss", None)
            if ts_loss is None:
                ts_loss = tstats.critic1_loss + tstats.critic2_loss
            cells = " | ".join(f"{worst[name]:.1e}" for name in names)
            ours_loss = float(stats["loss/critic"])
            print(f"| {step} | {cells} | {ours_loss:.6g} | {float(ts_loss):.6g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
