"""Action masks in core: the masked helpers of rlblocks.algo, where the mask comes from (a Dict
observation's "action_mask", or info through ActionMaskFromInfo), the collector's warm-up
actions, the encoders leaving the mask out, and the refusal of algorithms without masks."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo import (
    MASKED_LOGIT,
    Categorical,
    MultiCategorical,
    mask_distribution,
    mask_logits,
    masked_argmax,
    masked_epsilon_greedy,
    masked_max,
    observation_mask,
)
from rlblocks.algo.nets import make_encoder
from rlblocks.contracts import (
    ActionMaskFromInfo,
    ConfigError,
    check_action_mask_space,
    has_action_mask,
    random_legal_actions,
)

# the support module (envs importable by path) lives in tests/support
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from tests_support_masked import ILLEGAL, MaskedChoiceEnv, info_masked_env, masked_env

MASK = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.int8)


# -- the helpers -------------------------------------------------------------------------------
def test_masked_argmax_and_max_pick_the_best_legal_action() -> None:
    q = torch.tensor([[0.0, 9.0, 1.0, 5.0], [3.0, 2.0, 1.0, -4.0], [0.0, 2.0, 1.0, 0.0]])
    # row 3 allows nothing (a finished game's last observation): every action counts as legal
    assert masked_argmax(q, MASK).tolist() == [2, 3, 1]
    assert masked_max(q, MASK).tolist() == [1.0, -4.0, 2.0]
    assert masked_argmax(q, None).tolist() == [1, 0, 1]


def test_masked_logits_are_large_finite_negatives() -> None:
    out = mask_logits(torch.zeros(3, 4), MASK)
    assert torch.isfinite(out).all()
    assert out[0].tolist() == [0.0, MASKED_LOGIT, 0.0, MASKED_LOGIT]
    assert (out[2] == 0).all()


def test_masked_categorical_log_prob_entropy_and_kl() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 3)
    dist = Categorical(logits, MASK)
    # row 0: a softmax over actions 0 and 2 only
    p = torch.softmax(torch.tensor([1.0, 3.0]), 0)
    torch.testing.assert_close(dist.probs[0], torch.tensor([p[0], 0.0, p[1], 0.0]))
    torch.testing.assert_close(dist.log_prob(torch.tensor([2, 3, 0]))[:2],
                               torch.stack([p[1].log(), torch.tensor(0.0)]))  # fmt: skip
    ent = dist.entropy()
    assert torch.isfinite(ent).all()
    torch.testing.assert_close(ent[0], -(p * p.log()).sum())
    assert float(ent[1]) == pytest.approx(0.0, abs=1e-6)  # one legal action
    other = Categorical(torch.zeros(3, 4), MASK)
    kl = dist.kl(other)
    assert torch.isfinite(kl).all() and (kl >= -1e-6).all()
    # sampling never draws a masked action
    big = Categorical(torch.zeros(2000, 4), MASK[:1].expand(2000, 4))
    assert set(big.sample().tolist()) == {0, 2}
    assert big.mode().tolist()[0] in (0, 2)


def test_masked_categorical_gradients_stay_finite() -> None:
    logits = torch.randn(3, 4, requires_grad=True)
    dist = Categorical(logits, MASK)
    (dist.log_prob(torch.tensor([0, 3, 1])).sum() + dist.entropy().sum()).backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 1] == 0 and logits.grad[0, 3] == 0  # masked logits learn nothing


def test_multicategorical_splits_the_mask_per_sub_space() -> None:
    mask = torch.tensor([[1, 0, 0, 1, 1], [0, 1, 1, 0, 0]])  # nvec (2, 3)
    dist = MultiCategorical(torch.zeros(2, 5), [2, 3], mask)
    samples = torch.stack([dist.sample() for _ in range(300)])  # [300, 2, 2]
    assert set(samples[:, 0, 0].tolist()) == {0} and set(samples[:, 0, 1].tolist()) == {1, 2}
    assert set(samples[:, 1, 0].tolist()) == {1} and set(samples[:, 1, 1].tolist()) == {0}
    torch.testing.assert_close(dist.entropy(), torch.tensor([np.log(2.0), 0.0]).float())
    # masked() of an unmasked distribution is the same as masking at construction
    again = MultiCategorical(torch.zeros(2, 5), [2, 3]).masked(mask)
    torch.testing.assert_close(again.entropy(), dist.entropy())


def test_mask_distribution_refuses_what_cannot_be_masked() -> None:
    class Opaque:
        pass

    assert mask_distribution("anything", None) == "anything"
    with pytest.raises(ConfigError, match="no masked"):
        mask_distribution(Opaque(), MASK)


def test_epsilon_greedy_and_random_actions_stay_legal() -> None:
    rng = np.random.default_rng(0)
    mask = np.array([[0, 1, 0, 1, 0]] * 500 + [[0, 0, 0, 0, 1]] * 500, dtype=np.int8)
    act = np.full(1000, 1)
    act[500:] = 4
    out = masked_epsilon_greedy(act, 1.0, mask, rng)
    assert set(out[:500].tolist()) == {1, 3} and set(out[500:].tolist()) == {4}
    assert (masked_epsilon_greedy(act, 0.0, mask, rng) == act).all()
    drawn = random_legal_actions(mask, gym.spaces.Discrete(5, start=2), rng)
    assert set(drawn[:500].tolist()) == {3, 5} and set(drawn[500:].tolist()) == {6}
    md = gym.spaces.MultiDiscrete([2, 3], start=[1, -1])
    drawn = random_legal_actions(np.array([[0, 1, 1, 0, 1]] * 300), md, rng)
    assert set(drawn[:, 0].tolist()) == {2} and set(drawn[:, 1].tolist()) == {-1, 1}
    # uniform over the legal actions
    counts = np.bincount(random_legal_actions(np.ones((6000, 3)), gym.spaces.Discrete(3), rng))
    assert counts.min() > 1800


def test_observation_mask_reads_the_dict_key() -> None:
    assert observation_mask(torch.zeros(2, 3)) is None
    got = observation_mask({"observation": torch.zeros(2, 3), "action_mask": torch.tensor(
        [[1.0, 0.0], [0.0, 0.0]])})  # fmt: skip
    assert got.tolist() == [[True, False], [True, True]]


# -- where masks come from ---------------------------------------------------------------------
def test_encoders_leave_the_mask_out_of_the_features() -> None:
    space = MaskedChoiceEnv().observation_space
    assert has_action_mask(space)
    enc = make_encoder(space)
    assert enc.out_dim == 2  # the Box alone
    obs = {"observation": torch.ones(3, 2), "action_mask": torch.ones(3, 5)}
    assert enc(obs).shape == (3, 2)


def test_a_mask_that_does_not_fit_the_action_space_is_refused() -> None:
    obs = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (2,)),
                           "action_mask": gym.spaces.MultiBinary(4)})  # fmt: skip
    with pytest.raises(ConfigError, match="one entry per action"):
        check_action_mask_space(obs, gym.spaces.Discrete(5))
    with pytest.raises(ConfigError, match="not Discrete or MultiDiscrete"):
        check_action_mask_space(obs, gym.spaces.Box(-1, 1, (4,)))
    check_action_mask_space(obs, gym.spaces.MultiDiscrete([2, 2]))  # 2 + 2 entries fit


def test_action_mask_from_info_moves_the_mask_into_the_observation() -> None:
    env = ActionMaskFromInfo(info_masked_env())
    assert has_action_mask(env.observation_space)
    obs, info = env.reset(seed=0)
    assert np.array_equal(obs["action_mask"], info["action_mask"])
    assert env.observation_space.contains(obs)
    obs, *_, info = env.step(4)  # always legal
    assert np.array_equal(obs["action_mask"], info["action_mask"])


def test_the_collector_refuses_masks_only_in_info() -> None:
    envs = rlblocks.make_vector_env("dummy", [info_masked_env] * 2, seed=0)
    policy = rlblocks.make_policy("dqn", envs.observation_space, envs.action_space)
    with pytest.raises(ConfigError, match="ActionMaskFromInfo"):
        rlblocks.Collector(policy, envs).collect(n_step=4)


@pytest.mark.parametrize("factory", [masked_env, lambda: ActionMaskFromInfo(info_masked_env())])
def test_random_warm_up_actions_are_legal(factory) -> None:
    envs = rlblocks.make_vector_env("dummy", [factory] * 4, seed=0)
    policy = rlblocks.make_policy("dqn", envs.observation_space, envs.action_space)
    buffer = rlblocks.make_buffer("replay", size=2000, num_envs=4)
    ILLEGAL["count"] = 0
    rlblocks.Collector(policy, envs, buffer, seed=0).collect(n_step=2000, random=True)
    assert ILLEGAL["count"] == 0
    batch, _ = buffer.sample(0)
    acts = np.asarray(batch.act)
    assert set(acts.tolist()) == {0, 1, 2, 3, 4}  # every action is drawn while legal
    # the buffer stores the mask with obs and obs_next, for targets
    assert np.asarray(batch.obs["action_mask"])[np.arange(len(acts)), acts].all()
    assert np.asarray(batch.obs_next["action_mask"]).shape == (len(acts), 5)


def test_random_warm_up_without_masks_sends_illegal_actions() -> None:
    # the control: the same env with its mask hidden gets masked actions from warm-up
    envs = rlblocks.make_vector_env(
        "dummy", [lambda: MaskedChoiceEnv(expose_mask=False)] * 4, seed=0
    )
    ILLEGAL["count"] = 0
    rlblocks.Collector(None, envs, None, seed=0).collect(n_step=400, random=True)
    assert ILLEGAL["count"] > 50


# -- declared in the spec, refused without -----------------------------------------------------
def test_spec_declares_masks_and_list_details_shows_it() -> None:
    from rlblocks.plugins import get_registry

    reg = get_registry("algo")
    assert reg.spec("dqn").action_masks and reg.spec("ppo").action_masks
    assert not reg.spec("sac").action_masks
    assert reg.spec("dqn").describe()["action_masks"] is True


def test_an_algorithm_without_masks_is_refused_naming_those_with(rlblocks_add_plugin) -> None:
    from rlblocks.plugins import AlgoSpec
    from rlblocks_algo_dqn.config import DQNConfig

    rlblocks_add_plugin(
        AlgoSpec(
            name="nomask",
            summary="DQN that does not say it honours masks",
            impl="rlblocks_algo_dqn.dqn:DQNPolicy",
            config=DQNConfig,
            observation_spaces=("Box", "Dict"),
            action_spaces=("Discrete",),
        )
    )
    space = MaskedChoiceEnv().observation_space
    with pytest.raises(ConfigError) as err:
        rlblocks.make_policy("nomask", space, gym.spaces.Discrete(5))
    msg = str(err.value)
    assert "'nomask' does not honour masks" in msg and "dqn" in msg and "ppo" in msg
    assert "nomask," not in msg and "\n" not in msg


#: PettingZoo's tic-tac-toe observation space (classic envs' convention), as the two-player
#: game env gives it to a single-agent algorithm
TICTACTOE = gym.spaces.Dict(
    {
        "action_mask": gym.spaces.Box(0, 1, (9,), np.int8),
        "observation": gym.spaces.Box(0, 1, (3, 3, 2), np.int8),
    }
)


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_dqn_and_ppo_take_the_tictactoe_observation(name: str) -> None:
    from rlblocks.contracts import Batch

    policy = rlblocks.make_policy(name, TICTACTOE, gym.spaces.Discrete(9))
    rng = np.random.default_rng(0)
    board = rng.integers(0, 2, (64, 3, 3, 2)).astype(np.int8)
    mask = np.zeros((64, 9), np.int8)
    only = rng.integers(0, 9, 64)
    mask[np.arange(64), only] = 1  # one legal square per board
    obs = {"action_mask": mask, "observation": board}
    for training in (False, True):
        policy.train(training)
        out = policy(Batch(obs=obs))
        act = np.asarray(out.act)
        if training:
            act = policy.exploration_noise(act, out)
        assert (act == only).all(), f"{name} (training={training}) took an illegal square"
    if name == "dqn":
        assert policy.model.body[0].in_features == 18  # the board alone: the mask is no feature


def test_a_mask_with_one_row_per_sub_space_fits() -> None:
    # a joint view of 3 agents with 4 actions each gives action_mask [3, 4]
    obs = gym.spaces.Dict({"obs": gym.spaces.Box(0, 1, (3, 2)),
                           "action_mask": gym.spaces.MultiBinary((3, 4))})  # fmt: skip
    check_action_mask_space(obs, gym.spaces.MultiDiscrete([4, 4, 4]))
    rng = np.random.default_rng(0)
    mask = np.zeros((200, 3, 4), np.int8)
    mask[:, 0, 1] = mask[:, 1, 3] = mask[:, 2, 0] = mask[:, 2, 2] = 1
    drawn = random_legal_actions(mask, gym.spaces.MultiDiscrete([4, 4, 4]), rng)
    assert set(drawn[:, 0]) == {1} and set(drawn[:, 1]) == {3} and set(drawn[:, 2]) == {0, 2}
