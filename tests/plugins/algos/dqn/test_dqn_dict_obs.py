"""DQN with Dict observations: leaves flattened in sorted key order, for acting and targets."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer
from rlblocks_algo_dqn.config import DQNConfig
from rlblocks_algo_dqn.dqn import DQNPolicy

NESTED = gym.spaces.Dict(
    {
        "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32),
        "mode": gym.spaces.Discrete(3),
        "goal": gym.spaces.Dict(
            {
                "target": gym.spaces.Box(-5.0, 5.0, (1,), np.float32),
                "bits": gym.spaces.MultiBinary(2),
            }
        ),
    }
)
ACT = gym.spaces.Discrete(2)


def nested_obs(b: int, offset: float = 0.0) -> dict:
    t = np.arange(b, dtype=np.float32) + offset
    bits = np.stack([t % 2, 1 - t % 2], 1).astype(np.int8)
    return {
        "pos": np.stack([t, -t], 1),
        "mode": (np.arange(b) % 3).astype(np.int64),
        "goal": {"target": t[:, None] * 10, "bits": bits},
    }


def test_nested_dict_leaves_are_flattened_in_sorted_key_order() -> None:
    policy = DQNPolicy(NESTED, ACT, DQNConfig(hidden_sizes=[8]))
    obs = nested_obs(4)
    got = policy.model.encoder(policy.obs_tensor(obs)).detach()
    # sorted paths: goal/bits, goal/target, mode (one-hot), pos
    want = np.concatenate(
        [obs["goal"]["bits"], obs["goal"]["target"], np.eye(3)[obs["mode"]], obs["pos"]], axis=1
    )
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))
    assert policy.model.body[0].in_features == 2 + 1 + 3 + 2


def test_make_policy_accepts_a_dict_space_and_acts_on_dict_batches() -> None:
    policy = rlblocks.make_policy("dqn", NESTED, ACT, hidden_sizes=[8])
    out = policy(Batch(obs=nested_obs(5)))
    assert out.act.shape == (5,) and out.logits.shape == (5, 2)
    # a plain dict and a Batch of the same arrays act the same
    same = policy(Batch(obs=Batch(nested_obs(5))))
    torch.testing.assert_close(out.logits, same.logits)


def test_targets_read_dict_obs_next_from_the_buffer_and_learning_fits_them() -> None:
    buf = ReplayBuffer(32)
    for t in range(6):
        buf.add({"obs": nested_obs(1, t), "act": np.array([t % 2]), "rew": np.array([float(t)]),
                 "terminated": np.array([t == 5]), "truncated": np.array([False]),
                 "obs_next": nested_obs(1, t + 1)})
    policy = DQNPolicy(NESTED, ACT, DQNConfig(lr=1e-2, gamma=0.0, n_step=1, tau=None,
                                              target_update_interval=0, hidden_sizes=[32]))
    idx = np.arange(6)
    batch = policy.process_fn(buf[idx], buf, idx)
    np.testing.assert_allclose(batch.returns, np.arange(6, dtype=np.float32))  # gamma=0: rew
    losses = [policy.update(0, buf)["loss"] for _ in range(300)]
    assert losses[-1] < 0.1 * losses[0]


def test_dict_observation_space_without_entries_is_refused() -> None:
    with pytest.raises(TypeError, match="no entries to encode"):
        DQNPolicy(gym.spaces.Dict({}), ACT)
