"""Rainbow's hyperparameters: C51's with every ingredient switched on, plus the switch of the
distributional loss itself. Imports only attrs (and C51's attrs-only config)."""

from __future__ import annotations

from attrs import define, field

from rlblocks.contracts import validators as check
from rlblocks_algo_c51.config import C51Config


@define(kw_only=True)
class RainbowConfig(C51Config):
    """Rainbow (Hessel et al., 2018): C51 + n-step + double + dueling + noisy nets (and the
    prioritized sampler, set in the buffer section). Exploration comes from the noisy layers,
    so epsilon is 0 unless set."""

    dueling: bool = True
    noisy: bool = True
    # 0.1 rather than the paper's 0.5: a small MLP's layers have small fan-ins, and 0.5 kept
    # CartPole near a return of 150 (Tianshou's CartPole test also uses 0.1)
    noisy_sigma0: float = field(default=0.1, validator=check.non_negative)
    eps_start: float = field(default=0.0, validator=check.unit_interval)
    eps_end: float = field(default=0.0, validator=check.unit_interval)
    distributional: bool = True
    """C51's categorical loss; False learns expected values with a Huber loss (the "no
    distributional" ablation of the paper)."""
