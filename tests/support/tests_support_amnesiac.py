"""A deliberately broken algorithm for the conformance kit's own tests."""

import torch

from rlblocks_algo_dqn.dqn import DQNPolicy


class AmnesiacDQN(DQNPolicy):
    """Loads the given weights with the Q-head negated, so every greedy action flips and a
    restored policy always acts differently (deterministically, whatever the seed)."""

    def load_state_dict(self, state, strict=True, assign=False):  # type: ignore[override]
        result = super().load_state_dict(state, strict=strict, assign=assign)
        head = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            head.weight.neg_()
            head.bias.neg_()
        return result
