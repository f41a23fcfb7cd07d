"""Entry-point specs of R2D2 and of its sampler: import nothing heavier than attrs."""

from attrs import define, field, validators

from rlblocks.contracts import validators as check
from rlblocks.plugins import AlgoSpec, BufferSpec
from rlblocks_algo_r2d2.config import R2D2Config


@define(kw_only=True)
class PrioritizedSequenceConfig:
    """Options of the prioritized sequence sampler (the buffer section holds size, storage...)."""

    length: int = field(default=16, validator=validators.ge(1))
    """Learned steps per window (after the burn-in); windows stop at episode ends (masked)."""
    burn_in: int = field(default=0, validator=validators.ge(0))
    """Steps at the start of each window that only warm the recurrent state up."""
    alpha: float = field(default=0.9, validator=check.non_negative)
    """Prioritisation exponent: P(window) is proportional to priority**alpha (0 = uniform)."""
    beta: float = field(default=0.6, validator=check.unit_interval)
    """Importance-sampling exponent at the start of training (1 = full bias correction)."""
    beta_final: float = field(default=0.6, validator=check.unit_interval)
    """Value beta is annealed to."""
    beta_anneal_steps: int = field(default=0, validator=validators.ge(0))
    """Env steps over which beta goes linearly from beta to beta_final (0 = keep beta)."""
    eps: float = field(default=1e-6, validator=check.positive)
    """Added to every window priority so that none is 0."""


SAMPLER_SPEC = BufferSpec(
    name="prioritized-sequence",
    summary="Sampler: windows with burn-in, drawn by priority over sequences (R2D2).",
    impl="rlblocks_algo_r2d2.sampler:PrioritizedSequenceSampler",
    config=PrioritizedSequenceConfig,
    part="sampler",
)

SPEC = AlgoSpec(
    name="r2d2",
    summary="R2D2: recurrent DQN on stored-state windows with burn-in and sequence priorities.",
    impl="rlblocks_algo_r2d2.r2d2:R2D2Policy",
    config=R2D2Config,
    observation_spaces=("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple"),
    action_spaces=("Discrete",),
    training="off-policy",
    action_masks=True,
    recurrent=True,
    networks=("encoder",),
    # Tuned on rlblocks/MaskedCartPole-v1 (seeds 0-2 solve within 20k-48k env steps). The
    # paper copies the target network every 2500 updates; a run this short makes only a few
    # thousand updates, and values propagate far faster with Polyak averaging (tau).
    defaults={
        "algo": {
            "lr": 1e-3,
            "gamma": 0.99,
            "n_step": 5,
            "tau": 0.01,
            "rnn_hidden": 32,
            "eps_decay_steps": 10_000,
        },
        "env": {"id": "rlblocks/MaskedCartPole-v1", "num_envs": 8, "num_test_envs": 20},
        "buffer": {
            "name": "replay",
            "sampler": "prioritized-sequence",
            "size": 50_000,
            "length": 16,
            "burn_in": 8,
            "alpha": 0.9,
            "beta": 0.6,
        },
        "trainer": {
            "max_env_steps": 80_000,
            "step_per_collect": 8,
            "update_per_step": 0.125,
            "batch_size": 32,
            # the buffer stores the recurrent state entering each step, which random warm-up
            # steps do not have
            "warmup_steps": 0,
            "test_interval": 2_500,
            "test_episodes": 100,
        },
    },
)
