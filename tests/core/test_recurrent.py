"""Recurrent bodies (acting step by step equals replaying a window, episode starts zero the
state, gradients flow), the collector carrying their state per env, and the masked CartPole."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import rlblocks
import rlblocks.run._envs  # registers rlblocks/MaskedCartPole-v1
from rlblocks.algo import BasePolicy
from rlblocks.algo.nets import RecurrentBody, detach_state
from rlblocks.collect import env_state as env_state
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer
from rlblocks.run import MASKED_CARTPOLE_ID, MaskedCartPole

CELLS = ["lstm", "gru"]
IN, HID, LAYERS = 3, 5, 2
TIGHT = {"rtol": 0.0, "atol": 1e-12}  # float64: only summation order may differ


def _body(cell: str, num_layers: int = LAYERS, seed: int = 0) -> RecurrentBody:
    torch.manual_seed(seed)
    return RecurrentBody(IN, HID, cell=cell, num_layers=num_layers).double()


def _random_state(body: RecurrentBody, batch: int, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, body.num_layers, body.hidden_size)
    return {k: torch.randn(shape, generator=gen, dtype=torch.float64) for k in body.state_keys}


def _inputs(batch: int, length: int, seed: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, IN, generator=gen, dtype=torch.float64)


def _step_by_step(body: RecurrentBody, x, state0, starts):
    """The reference: act one step at a time, zeroing the rows that start an episode, as the
    collector does."""
    state = {k: v.clone() for k, v in state0.items()}
    ys = []
    for t in range(x.shape[1]):
        if starts is not None:
            rows = starts[:, t]
            state = {k: v.masked_fill(rows.view(-1, 1, 1), 0.0) for k, v in state.items()}
        y, state = body.step(x[:, t], state)
        ys.append(y)
    return torch.stack(ys, dim=1), state


def _assert_states_close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], **TIGHT)


# -- layout -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", CELLS)
def test_state_is_a_dict_of_batch_first_tensors(cell: str) -> None:
    body = RecurrentBody(IN, HID, cell=cell, num_layers=LAYERS)
    keys = {"h", "c"} if cell == "lstm" else {"h"}
    assert body.out_dim == HID
    zero = body.initial_state(4, "cpu")
    assert set(zero) == keys
    for value in zero.values():
        assert value.shape == (4, LAYERS, HID) and value.dtype == torch.float32
        assert not value.any()
    y, state = body.step(torch.randn(4, IN), None)
    assert y.shape == (4, HID) and set(state) == keys
    assert all(v.shape == (4, LAYERS, HID) for v in state.values())
    # the top layer's hidden state is the output: the batch axis really is first
    torch.testing.assert_close(state["h"][:, -1], y)
    ys, last = body.sequence(torch.randn(4, 6, IN), state)
    assert ys.shape == (4, 6, HID) and all(v.shape == (4, LAYERS, HID) for v in last.values())
    # None means zeros
    x = torch.randn(4, IN)
    torch.testing.assert_close(body.step(x, None)[0], body.step(x, zero)[0], rtol=0, atol=0)


def test_bad_cells_and_state_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown recurrent cell 'rnn'"):
        RecurrentBody(IN, HID, cell="rnn")
    body = RecurrentBody(IN, HID, cell="lstm", num_layers=LAYERS)
    torch_layout = {k: v.transpose(0, 1) for k, v in body.initial_state(4).items()}
    with pytest.raises(ValueError, match=r"expected \[batch=4, layers=2, hidden=5\]"):
        body.step(torch.randn(4, IN), torch_layout)
    with pytest.raises(ValueError, match="starts has shape"):
        body.sequence(torch.randn(4, 6, IN), None, torch.zeros(4, 5, dtype=torch.bool))


# -- step == sequence ---------------------------------------------------------------------------
@pytest.mark.parametrize("cell", CELLS)
def test_sequence_equals_stepping_without_restarts(cell: str) -> None:
    body = _body(cell)
    x, state0 = _inputs(4, 7), _random_state(body, 4)
    y_ref, last_ref = _step_by_step(body, x, state0, None)
    no_starts = torch.zeros(4, 7, dtype=torch.bool)
    for starts in (None, no_starts):
        y, last = body.sequence(x, state0, starts)
        torch.testing.assert_close(y, y_ref, **TIGHT)
        _assert_states_close(last, last_ref)
    # starts in column 0 only: those rows begin from zeros, the others from state0
    first = no_starts.clone()
    first[[0, 2], 0] = True
    y, last = body.sequence(x, state0, first)
    y_ref, last_ref = _step_by_step(body, x, state0, first)
    torch.testing.assert_close(y, y_ref, **TIGHT)
    _assert_states_close(last, last_ref)
    assert not torch.allclose(y[0], body.sequence(x[:1], {k: v[:1] for k, v in state0.items()})[0])


def _restart_patterns(batch: int, length: int) -> dict[str, torch.Tensor]:
    some_rows = torch.zeros(batch, length, dtype=torch.bool)
    some_rows[1, 3] = some_rows[3, 5] = some_rows[3, 2] = True
    one_column = torch.zeros(batch, length, dtype=torch.bool)
    one_column[:, 4] = True
    with_first = some_rows.clone()
    with_first[[0, 1], 0] = True
    every = torch.zeros(batch, length, dtype=torch.bool)
    every[2, :] = True  # one-step episodes in row 2: every column is a cut
    last = torch.zeros(batch, length, dtype=torch.bool)
    last[0, length - 1] = True
    return {
        "some_rows": some_rows,
        "one_column": one_column,
        "with_first": with_first,
        "every": every,
        "last": last,
    }


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("pattern", list(_restart_patterns(4, 7)))
def test_sequence_equals_stepping_with_restarts(cell: str, pattern: str) -> None:
    body = _body(cell)
    x, state0 = _inputs(4, 7), _random_state(body, 4)
    starts = _restart_patterns(4, 7)[pattern]
    y, last = body.sequence(x, state0, starts)
    y_ref, last_ref = _step_by_step(body, x, state0, starts)
    torch.testing.assert_close(y, y_ref, **TIGHT)
    _assert_states_close(last, last_ref)
    # and the restarts mattered: ignoring them gives other outputs
    assert not torch.allclose(y, body.sequence(x, state0)[0])


@pytest.mark.parametrize("cell", CELLS)
def test_a_start_inside_the_window_equals_a_fresh_sequence_from_there(cell: str) -> None:
    body = _body(cell)
    x, state0 = _inputs(3, 8), _random_state(body, 3)
    starts = torch.zeros(3, 8, dtype=torch.bool)
    starts[1, 5] = True
    y, last = body.sequence(x, state0, starts)
    fresh_y, fresh_last = body.sequence(x[1:2, 5:], None)
    torch.testing.assert_close(y[1:2, 5:], fresh_y, **TIGHT)
    _assert_states_close({k: v[1:2] for k, v in last.items()}, fresh_last)
    # the steps before the start, and the rows without one, run on from state0 untouched
    rows = [0, 2]
    other_y, other_last = body.sequence(x[rows], {k: v[rows] for k, v in state0.items()})
    torch.testing.assert_close(y[rows], other_y, **TIGHT)
    _assert_states_close({k: v[rows] for k, v in last.items()}, other_last)
    before, _ = body.sequence(x[1:2, :5], {k: v[1:2] for k, v in state0.items()})
    torch.testing.assert_close(y[1:2, :5], before, **TIGHT)


@pytest.mark.parametrize("cell", CELLS)
def test_sequence_runs_one_fused_call_per_segment_not_per_step(cell: str) -> None:
    body = _body(cell)
    calls: list[int] = []
    body.rnn.register_forward_hook(lambda _m, args, _out: calls.append(args[0].shape[1]))
    x = _inputs(4, 12)
    body.sequence(x, None, None)
    assert calls == [12]
    calls.clear()
    starts = torch.zeros(4, 12, dtype=torch.bool)
    starts[:, 0] = True
    body.sequence(x, None, starts)
    assert calls == [12]  # a start in column 0 only needs no split
    calls.clear()
    starts[1, 4] = starts[3, 4] = starts[2, 9] = True
    body.sequence(x, None, starts)
    assert calls == [4, 5, 3]  # columns 0-3, 4-8, 9-11


@pytest.mark.parametrize("cell", CELLS)
def test_step_and_sequence_accept_a_state_read_back_as_arrays(cell: str) -> None:
    body = _body(cell)
    x, state0 = _inputs(2, 4), _random_state(body, 2)
    as_arrays = {k: v.numpy() for k, v in state0.items()}
    torch.testing.assert_close(body.sequence(x, as_arrays)[0], body.sequence(x, state0)[0])
    torch.testing.assert_close(body.step(x[:, 0], as_arrays)[0], body.step(x[:, 0], state0)[0])


# -- gradients ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", CELLS)
def test_gradients_flow_through_sequence_and_stop_at_starts(cell: str) -> None:
    body = _body(cell)
    x = _inputs(3, 8).requires_grad_(True)
    state0 = {k: v.requires_grad_(True) for k, v in _random_state(body, 3).items()}
    starts = torch.zeros(3, 8, dtype=torch.bool)
    starts[0, 0] = True  # row 0 ignores state0
    starts[1, 5] = True  # row 1 restarts at step 5
    y, last = body.sequence(x, state0, starts)
    (y.square().sum() + sum(v.sum() for v in last.values())).backward()
    for name, param in body.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert x.grad is not None and bool((x.grad.abs().sum(dim=2) > 0).all())
    for value in state0.values():
        assert value.grad is not None
        assert not value.grad[0].any()  # zeroed at its start: no gradient into the old state
        assert value.grad[1].abs().sum() > 0 and value.grad[2].abs().sum() > 0
    # row 1's second episode (steps 5..7) does not depend on steps 0..4
    x2 = x.detach().clone().requires_grad_(True)
    y2, _ = body.sequence(x2, detach_state(state0), starts)
    y2[1, 5:].sum().backward()
    assert x2.grad is not None
    assert not x2.grad[1, :5].any() and x2.grad[1, 5:].abs().sum() > 0


def test_detach_state_cuts_the_graph_and_keeps_the_values() -> None:
    body = _body("lstm")
    _, state = body.step(_inputs(2, 1)[:, 0], None)
    assert all(v.requires_grad for v in state.values())
    cut = detach_state(state)
    assert cut is not None and cut.keys() == state.keys()
    for key in state:
        assert not cut[key].requires_grad
        torch.testing.assert_close(cut[key], state[key].detach(), rtol=0, atol=0)
    assert detach_state(None) is None


# -- the collector carries the state ------------------------------------------------------------
class _RecordingEnvs:
    """A vector env that records which envs stepped and which of them ended an episode."""

    def __init__(self, envs: Any) -> None:
        self.wrapped = envs
        self.steps: list[tuple[np.ndarray, np.ndarray]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def step(self, actions: Any, env_ids: Any = None) -> Any:
        out = self.wrapped.step(actions, env_ids)
        ids = np.arange(self.wrapped.num_envs) if env_ids is None else np.asarray(env_ids)
        self.steps.append((ids, np.asarray(out[2]) | np.asarray(out[3])))
        return out


class _RecurrentPolicy(BasePolicy):
    """Acts greedily through an LSTM; records the state it was given and the one it returned."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__(observation_space, action_space)
        torch.manual_seed(0)
        self.body = RecurrentBody(int(observation_space.shape[0]), 8, cell="lstm")
        self.head = nn.Linear(8, int(action_space.n))
        self.calls: list[tuple[dict | None, dict]] = []

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        obs = torch.as_tensor(batch.obs, dtype=torch.float32)
        y, new_state = self.body.step(obs, state)
        state_in = self.body.initial_state(len(obs)) if state is None else state
        self.calls.append(
            (
                None if state is None else {k: v.clone() for k, v in state.items()},
                {k: v.clone() for k, v in new_state.items()},
            )
        )
        act = self.head(y).argmax(dim=1)
        return Batch(act=act, state=new_state, policy=Batch(state_in_h=state_in["h"].clone()))


def test_the_collector_carries_the_state_and_zeroes_it_at_episode_ends() -> None:
    venv = rlblocks.make_vector_env("dummy", MASKED_CARTPOLE_ID, num_envs=3, seed=0)
    envs = _RecordingEnvs(venv)
    policy = _RecurrentPolicy(venv.observation_space, venv.action_space)
    buf = ReplayBuffer(2000, num_envs=3)
    collector = rlblocks.Collector(policy, envs, buf, seed=0)
    collector.collect(n_step=3 * 150)  # every env active; episodes end and restart
    second = len(policy.calls)
    collector.collect(n_episode=4)  # resets every env; envs retire, so later rounds are subsets
    assert len(policy.calls) == len(envs.steps)
    # the collector starts from no state, and forgets it when it resets the envs
    assert [i for i, (state_in, _) in enumerate(policy.calls) if state_in is None] == [0, second]

    expected = {k: torch.zeros(3, 1, 8) for k in ("h", "c")}  # per env, what it should carry
    ended = continued = 0
    for (state_in, state_out), (ids, done) in zip(policy.calls, envs.steps, strict=True):
        if state_in is None:  # fresh episodes everywhere: the policy acts from zeros
            expected = {k: torch.zeros(3, 1, 8) for k in ("h", "c")}
        else:
            for key in ("h", "c"):
                torch.testing.assert_close(state_in[key], expected[key][ids], rtol=0, atol=0)
        for key in ("h", "c"):
            expected[key][ids] = state_out[key]
            expected[key][ids[done]] = 0.0  # a finished episode's env starts from zeros
        ended += int(done.sum())
        continued += int((~done).sum())
    assert ended >= 6 and continued > ended  # episodes ended and others carried on
    assert any(len(ids) < 3 for ids, _ in envs.steps)  # rounds of a subset of envs happened

    # the buffer stored the state each step acted from: zeros exactly at episodes' first steps
    index = buf.sample_indices(0)
    stored = buf[index].policy.state_in_h
    assert stored.shape == (len(index), 1, 8)
    first = np.asarray(buf.prev(index)) == index
    assert first.sum() >= 6
    assert not stored[first].any()
    assert np.abs(stored[~first]).reshape(int((~first).sum()), -1).max(axis=1).min() > 0


# -- the masked CartPole ------------------------------------------------------------------------
def test_masked_cartpole_is_registered_like_cartpole() -> None:
    spec, plain = gym.spec(MASKED_CARTPOLE_ID), gym.spec("CartPole-v1")
    assert spec.reward_threshold == plain.reward_threshold == 475.0
    assert spec.max_episode_steps == plain.max_episode_steps == 500
    env = gym.make(MASKED_CARTPOLE_ID)
    assert env.observation_space.shape == (2,) and env.observation_space.dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(2)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert env_state.why_not(env) == ""


def test_masked_cartpole_shows_cartpoles_positions() -> None:
    masked, full = gym.make(MASKED_CARTPOLE_ID), gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    for seed in (0, 7):
        m_obs, _ = masked.reset(seed=seed)
        f_obs, _ = full.reset(seed=seed)
        steps = 0
        while True:
            np.testing.assert_array_equal(m_obs, f_obs[[0, 2]])
            action = int(rng.integers(2))
            m_obs, m_rew, m_term, m_trunc, _ = masked.step(action)
            f_obs, f_rew, f_term, f_trunc, _ = full.step(action)
            assert (m_rew, m_term, m_trunc) == (f_rew, f_term, f_trunc)
            steps += 1
            if m_term or m_trunc:
                break
        np.testing.assert_array_equal(m_obs, f_obs[[0, 2]])
        assert steps > 5 and np.abs(f_obs[[1, 3]]).max() > 0  # velocities existed and were cut


def test_masked_cartpole_wraps_an_existing_cartpole() -> None:
    env = MaskedCartPole(gym.make("CartPole-v1"))
    assert env.reset(seed=0)[0].shape == (2,)
    with pytest.raises(TypeError, match="not both"):
        MaskedCartPole(gym.make("CartPole-v1"), render_mode="rgb_array")
    with pytest.raises(ValueError, match="Box"):
        MaskedCartPole(gym.make("MountainCar-v0"))


def test_masked_cartpole_snapshot_restores_exactly() -> None:
    actions = np.random.default_rng(1).integers(2, size=400)
    original = gym.make(MASKED_CARTPOLE_ID)
    original.reset(seed=3)
    for a in actions[:10]:
        original.step(int(a))
    saved = env_state.snapshot(original)
    assert saved is not None

    def play(env: gym.Env) -> list[Any]:
        out = []
        for a in actions[10:]:
            obs, rew, term, trunc, _ = env.step(int(a))
            out.append((obs.tolist(), rew, term, trunc))
            if term or trunc:
                out.append(env.reset()[0].tolist())  # the random generator came back too
        return out

    twin = gym.make(MASKED_CARTPOLE_ID)
    twin.reset(seed=99)
    env_state.restore(twin, saved)
    expected = play(original)
    assert play(twin) == expected
    other = gym.make(MASKED_CARTPOLE_ID)
    other.reset(seed=99)
    assert play(other) != expected
