"""A deliberately broken algorithm for the conformance kit's own tests."""

from rlblocks_algo_dqn.dqn import DQNPolicy


class AmnesiacDQN(DQNPolicy):
    """Ignores the weights it is given, so restored policies act differently."""

    def load_state_dict(self, state, strict=True, assign=False):  # type: ignore[override]
        import torch

        for p in self.parameters():
            torch.nn.init.normal_(p)
        return None
