"""The sections of a run configuration (attrs classes) and their validators.

See :mod:`rlblocks.run` for how they are filled from files, flags and overrides.
"""

from collections.abc import Callable
from typing import Any

import attrs
from attrs import define, field

from rlblocks.contracts import validators as check
from rlblocks.plugins import PluginSpec

SpecLookup = Callable[[str, str], PluginSpec]
"""``(kind, name) -> spec``, e.g. ``lambda kind, name: get_registry(kind).spec(name)``."""


# --- validators (they run when a section is built, never in the training loop) -----------------


def _int_at_least(low: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"must be an int >= {low}, got {value!r}")

    return check


#: the largest run seed: torch seeds its generators from an unsigned 64-bit number, and a run
#: derives further seeds from its own by adding offsets (test envs, buffers, env workers)
MAX_SEED = 2**63 - 1


def _seed_value(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"must be an int >= 0 and at most 2**63 - 1, got {value!r}")


#: the most gradient steps per env step a run takes (REDQ's 20 is the largest of the shipped
#: algorithms); more would make one collect's updates run for hours without a line of output
MAX_UPDATE_PER_STEP = 1000


def _update_rate(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    if not ok or not 0 <= value <= MAX_UPDATE_PER_STEP:
        raise ValueError(
            f"must be a number from 0 to {MAX_UPDATE_PER_STEP} (gradient steps per env step), "
            f"got {value!r}"
        )


def _path_needs_memmap(inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    """``path`` is where memory-mapped arrays live: with ``storage="memory"`` it would do
    nothing."""
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must name a directory, got {value!r}")
    if inst.storage == "memory":  # (another bad storage is reported on its own line)
        raise ValueError(
            f"{value!r} is where storage='memmap' keeps its array files, and buffer.storage is "
            f"{inst.storage!r}, which keeps them in RAM; set buffer.storage=memmap or leave "
            "buffer.path out"
        )


#: the most frames a buffer stacks (Atari's 4 is the usual; a policy reads them all each step)
MAX_STACK = 1024


def _stack_fits(inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    size = inst.size
    if isinstance(value, int) and value > MAX_STACK:
        raise ValueError(f"{value} frames: a buffer stacks at most {MAX_STACK} (4 is the usual)")
    # (a size below 1 is reported on its own line)
    if isinstance(value, int) and isinstance(size, int) and 1 <= size < value:
        raise ValueError(
            f"{value} frames exceed buffer.size={size}, which never holds that many; lower "
            "buffer.stack_num or raise buffer.size"
        )


def _optional_int_at_least(low: int) -> Callable[[Any, attrs.Attribute, Any], None]:
    check = _int_at_least(low)

    def check_optional(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None:
            check(inst, attribute, value)

    return check_optional


def _warmup_within_budget(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Random warm-up steps leave some of ``max_env_steps`` for learning."""
    budget = inst.max_env_steps
    if isinstance(value, int) and isinstance(budget, int) and value >= budget > 0:
        raise ValueError(
            f"{value} leaves no env step of trainer.max_env_steps={budget} for learning (the "
            "warm-up acts randomly); lower it or raise max_env_steps"
        )


def _within_budget(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A collect of ``value`` env steps fits in ``max_env_steps`` (a longer one overruns it)."""
    if attribute.name == "step_per_collect" and inst.episode_per_collect is not None:
        return  # whole episodes are collected instead
    budget = inst.max_env_steps
    if isinstance(value, int) and isinstance(budget, int) and value > budget:
        raise ValueError(
            f"{value} exceeds trainer.max_env_steps={budget}, so the run would overshoot its "
            f"budget; lower it or raise max_env_steps"
        )


def _non_empty_str(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {value!r}")


def _check_run_dir(value: Any) -> None:
    """A run directory is a non-empty path (an empty one would be the current directory)."""
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"must name a directory (or be left out for a fresh one under runs/), got "
            f"{value!r}; an empty path would put the run's files into the current directory"
        )


# --- sections ----------------------------------------------------------------------------------

# A section whose ``options`` field holds a plugin's config says which plugin kind and which of
# its own fields names the plugin, e.g. ``("buffer", "name")``.
_PLUGIN_FIELD = "rlblocks_plugin"


@define(kw_only=True)
class EnvConfig:
    """The environments: which gymnasium env, how many copies, and the vector backend."""

    id: str = field(default="CartPole-v1", validator=_non_empty_str)
    """Gymnasium env id, passed to ``gymnasium.make``."""
    num_envs: int = field(default=8, validator=_int_at_least(1))
    """Parallel training envs."""
    num_test_envs: int = field(default=8, validator=_int_at_least(1))
    """Parallel envs used for test evaluations."""
    backend: str = field(default="dummy", validator=_non_empty_str)
    """Registry name of the vector-env backend (``rlblocks list env``)."""
    make_kwargs: dict[str, Any] = field(factory=dict)
    """Extra keyword arguments passed to ``gymnasium.make`` (JSON on the command line:
    ``--set 'env.make_kwargs={"continuous": true}'``)."""
    wrappers: list[Any] = field(factory=list, validator=lambda _i, _a, v: _check_wrappers(v))
    """Gymnasium wrappers around every env, innermost first: import paths
    (``"gymnasium.wrappers:ClipReward"``) or tables ``{path = "...", kwargs = {...}}``."""
    train_wrappers: list[Any] = field(
        factory=list, validator=lambda _i, _a, v: _check_wrappers(v, "env.train_wrappers")
    )
    """Wrappers around the training envs only, outside ``wrappers`` (reward clipping, a lost life
    ending the learning episode): test episodes keep the env's own rewards and episodes."""
    factory: str | None = field(default=None, validator=lambda i, a, v: _optional_name(i, a, v))
    """Recorded by ``train(env=callable)``: ``module:qualname`` of the factory the run's envs
    came from (``id`` is then only the id its env registered under, without the factory's
    wrappers or settings). Never imported: evaluating or resuming such a run needs the factory
    passed again."""
    info_keys: list[str] = field(factory=list, validator=lambda _i, _a, v: _check_info_keys(v))
    """Keys of the training envs' step infos stored with every step (``batch.info.<key>`` in
    training), e.g. ``["cost"]``; every step must report them."""
    policy_mapping: dict[str, str] = field(
        factory=dict, validator=lambda _i, _a, v: _check_policy_mapping(v)
    )
    """Multi-agent envs: agent name (or ``fnmatch`` pattern; the first match wins) -> policy
    name, one policy (with its own buffer) per name, e.g. ``{speaker_0 = "speaker",
    "listener_*" = "listener"}``. Empty: every agent shares one policy."""
    options: Any = field(default=None, metadata={_PLUGIN_FIELD: ("env", "backend")})
    """The backend's own config instance (its spec's ``config``); None when it has none."""


def _check_info_keys(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(k, str) and k for k in value):
        raise ValueError(f"env.info_keys must be a list of info key names, got {value!r}")


def _check_policy_mapping(value: Any) -> None:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()
    ):
        raise ValueError(
            f"env.policy_mapping must map agent names or patterns to policy names, got {value!r}"
        )


def _check_wrappers(value: Any, where: str = "env.wrappers") -> None:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, got {value!r}")
    for item in value:
        path = item.get("path") if isinstance(item, dict) else item
        ok = isinstance(path, str) and ":" in path and all(path.split(":"))
        if isinstance(item, dict):
            ok = ok and set(item) <= {"path", "kwargs"} and isinstance(item.get("kwargs", {}), dict)
        if not ok:
            raise ValueError(
                f"{where} entry {item!r}: write 'module:Class' or "
                "{path = 'module:Class', kwargs = {...}}"
            )


def _optional_name(_inst: Any, _attribute: attrs.Attribute, value: Any) -> None:
    if value is not None:
        _non_empty_str(_inst, _attribute, value)


@define(kw_only=True)
class BufferConfig:
    """The replay buffer: its layout and other parts by name, its capacity and storage, and the
    parts' own options (one flat table: ``alpha``, ``k``... sit beside ``name``)."""

    name: str = field(default="replay", validator=_non_empty_str)
    """Registry name of the buffer's layout (``rlblocks list buffer``), or of another part,
    which then goes on that part's default layout ("prioritized" = the per-env layout with the
    prioritized sampler). A run that names none gets "vector" (one sub-buffer per env) when it
    has several training envs and rlblocks-buffer-vector is installed, else "replay"."""
    size: int = field(default=100_000, validator=_int_at_least(1))
    """Capacity in transitions, over all envs."""
    sampler: str | None = field(default=None, validator=_optional_name)
    """Registry name of the sampler ("uniform", "prioritized", "sequence"...); None: uniform,
    or the one ``name`` names."""
    relabel: str | None = field(default=None, validator=_optional_name)
    """Registry name of a relabeller ("her"), or None."""
    writer: str | None = field(default=None, validator=_optional_name)
    """Registry name of a writer ("cached": only whole episodes enter), or None."""
    stack_num: int = field(default=1, validator=[_int_at_least(1), _stack_fits])
    """Frames stacked along a new axis 1 when reading obs/obs_next/info/policy (1 = none); at
    most 1024, and at most ``size``."""
    ignore_obs_next: bool = False
    """Do not store obs_next; rebuild it from the next transition's obs (saves memory)."""
    storage: str = field(default="memory", validator=attrs.validators.in_(("memory", "memmap")))
    """Where the arrays live: "memory" (RAM) or "memmap" (.npy files under path, may exceed RAM;
    flush() makes them durable and the same path reopens them)."""
    path: str | None = field(default=None, validator=_path_needs_memmap)
    """Directory of the memory-mapped files (storage="memmap" only: with "memory" it is
    refused, as it would do nothing)."""
    dataset: str | None = field(default=None, validator=_optional_name)
    """Offline algorithms (spec ``training="offline"``, e.g. td3bc): the hdf5 file of
    transitions the run learns from (``rlblocks train td3bc --dataset FILE``), written by
    ``ReplayBuffer.save_hdf5`` or by an online run's checkpoints
    (``RUN_DIR/checkpoints/gen-N/buffer.h5``). It lives here because the dataset *is* the run's
    buffer: it is loaded with the layout and parts the file names (``name``, ``size``,
    ``sampler``... of this section are not used), ``storage``/``path`` say where its arrays go,
    and nothing is ever added to it. It is read, never written: checkpoints record its size and
    sha256, and a resume reloads it from this path and refuses a file that changed. Online
    algorithms refuse it."""
    options: Any = field(default=None, metadata={_PLUGIN_FIELD: ("buffer", "name")})
    """The parts' own config instances, ``{"layout": ..., "sampler": ...}`` (None where a part
    has no options)."""


def _fragment_needs_truncate(inst: Any, _attribute: Any, value: Any) -> None:
    if value is not None and inst.batch_mode != "truncate_episodes":
        raise ValueError(
            "is the exact number of steps per env of truncate_episodes collects; "
            "complete_episodes collects whole episodes (leave it unset)"
        )


@define(kw_only=True)
class TrainerConfig:
    """The training loop: how long, how often to collect, learn, test and checkpoint."""

    max_env_steps: int = field(default=1_000_000, validator=_int_at_least(1))
    """Stop after this many env steps (summed over all training envs). Online algorithms only:
    an offline run takes no env step (its budget is ``max_gradient_steps``)."""
    max_gradient_steps: int | None = field(default=None, validator=_optional_int_at_least(1))
    """Offline algorithms: stop after this many gradient steps (their budget; the algorithm's
    default when it has one). ``test_interval`` and ``checkpoint_interval`` then count gradient
    steps too. Online algorithms refuse it (their budget is ``max_env_steps``)."""
    step_per_round: int = field(default=100, validator=_int_at_least(1))
    """Offline algorithms: gradient steps per round of the offline trainer (what a collect is
    online: the stop rule, stop requests and the finite check act between rounds)."""
    step_per_collect: int = field(default=8, validator=[_int_at_least(1), _within_budget])
    """Env steps collected per training collect (at most ``max_env_steps``)."""
    batch_mode: str = field(
        default="truncate_episodes",
        validator=check.one_of("truncate_episodes", "complete_episodes"),
    )
    """How training collects cut episodes (RLlib's names): ``truncate_episodes`` collects
    ``step_per_collect`` steps (whole rounds of every env) and running episodes go on in the
    next collect; ``complete_episodes`` collects whole episodes only, at least
    ``step_per_collect`` steps, every env starting a fresh episode."""
    rollout_fragment_length: int | None = field(
        default=None, validator=[_optional_int_at_least(1), _fragment_needs_truncate]
    )
    """With ``truncate_episodes``: exactly this many steps of every env per collect (it then
    replaces ``step_per_collect``; RLlib's ``rollout_fragment_length``)."""
    count_steps_by: str = field(
        default="env_steps", validator=check.one_of("env_steps", "agent_steps")
    )
    """Multi-agent envs: what step counts (budget, collects, tests) count - ``env_steps`` (one
    per env step, however many agents act) or ``agent_steps`` (one per agent transition;
    RLlib's ``count_steps_by``). The same for single-agent envs."""
    async_collect: bool = False
    """Off-policy: collect with the AsyncCollector, which acts for whichever training envs are
    back instead of waiting for the slowest (for envs whose step times vary); how many it waits
    for is the backend's ``wait_num`` / ``timeout`` option (``env.wait_num``). Steps
    still running at an update are stored after it, acted by the policy before it; those
    running at a checkpoint or at the end are taken back first (counted as the run's). Needs a
    backend that steps envs asynchronously (``rlblocks list env --details``: async); not for
    on-policy, offline or multi-agent runs, ``complete_episodes`` or
    ``rollout_fragment_length`` (they step every env together)."""
    update_per_step: float = field(default=1.0, validator=_update_rate)
    """Gradient steps per collected env step (off-policy), at most 1000."""
    batch_size: int = field(default=64, validator=_int_at_least(1))
    """Transitions per gradient step."""
    warmup_steps: int = field(default=0, validator=[_int_at_least(0), _warmup_within_budget])
    """Env steps with random actions before learning starts (less than max_env_steps)."""
    test_interval: int = field(default=5_000, validator=_int_at_least(1))
    """Env steps between test evaluations (gradient steps for offline algorithms)."""
    test_episodes: int = field(default=100, validator=_int_at_least(1))
    """Episodes per test evaluation."""
    log_interval: int = field(default=1_000, validator=_int_at_least(1))
    """Env steps between logs of the update statistics (losses, learning rates; their means
    since the last log), gradient steps for offline algorithms. Collect and test statistics
    are logged as they happen."""
    test_at_start: bool = False
    """Also test the untrained policy before the first env step (gradient step offline), so the
    learning curve starts at 0 (Tianshou's epoch-0 test). Off by default: it costs one test.
    A warm-up that would reach a test step is then not tested again (the policy is the same)."""
    test_in_training: bool = True
    """Also test as soon as the mean return of the latest 10 training episodes reaches the stop
    reward (at most once per quarter of test_interval), so a run stops once solved instead of at
    the next scheduled test."""
    test_screen_episodes: int = field(default=10, validator=_int_at_least(0))
    """With a stop reward, each test first plays this many episodes and goes on to all
    test_episodes unless their mean is clearly below the stop reward (by more than two standard
    errors; a test that cannot pass costs a tenth); screened-out tests are logged as
    test_screen and do not count, neither for the stop rule nor for the best test and
    best.pt. 0 turns it off; the test that ends a run is always complete."""
    stop_reward: float | None = field(
        default=None, validator=check.optional(check.finite, "the env's registered threshold")
    )
    """Stop when the mean test return reaches this; None uses the env's registered threshold."""
    checkpoint_interval: int = field(default=50_000, validator=_int_at_least(1))
    """Env steps between checkpoints (gradient steps for offline algorithms)."""
    repeat_per_collect: int = field(default=1, validator=_int_at_least(1))
    """Passes over each collected batch (on-policy)."""
    episode_per_collect: int | None = field(default=None, validator=_optional_int_at_least(1))
    """Collect whole episodes instead of ``step_per_collect`` steps when set (on-policy)."""
    on_nonfinite: str = field(default="raise", validator=check.one_of("raise", "skip_update"))
    """What a gradient step whose loss or gradients are NaN or infinite does: ``raise`` stops
    the run with a NonFiniteError (before anything is tested or checkpointed), ``skip_update``
    leaves the parameters and optimizer state as they were and counts it (``skipped_steps`` in
    the update logs). Parameters that turn non-finite always stop the run."""


#: The loggers a run uses unless told otherwise; ``rlblocks train --logger NAME`` adds to them,
#: ``--no-default-loggers`` leaves them out. A default logger that is not installed is left out
#: of a run that did not ask for it by name, with a warning saying how to install it.
DEFAULT_LOGGERS: tuple[str, ...] = ("tensorboard", "csv")


@define(kw_only=True)
class RunConfig:
    """Run-level settings: seed, device, loggers, where results go."""

    seed: int = field(default=0, validator=_seed_value)
    """Seed of every random generator; env i gets ``seed + i``. From 0 to 2**63 - 1."""
    device: str = field(default="cpu", validator=_non_empty_str)
    """Torch device of the networks (``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
    loggers: list[str] = field(factory=lambda: list(DEFAULT_LOGGERS))
    """Registry names of the loggers to attach (the default ones that are installed, when not
    given)."""
    logger_options: dict[str, dict[str, Any]] = field(factory=dict)
    """Options of each logger by name, checked against its config class
    (``--set 'run.logger_options={"wandb": {"project": "cartpole"}}'``)."""
    run_dir: str | None = field(default=None, validator=lambda _i, _a, v: _check_run_dir(v))
    """Directory for config, logs and checkpoints; None picks a fresh one under ``runs/``."""
    progress: bool = True
    """Show a progress bar."""
    torch_threads: int = field(default=1, validator=_int_at_least(0))
    """Torch intra-op threads; 1 is fastest for the small networks of most RL runs (and leaves
    cores to the envs), 0 keeps torch's default of one per core."""
    save_buffer: bool = True
    """Write the replay buffer to ``buffer.h5`` at each checkpoint so a resumed run keeps it."""
    flush_denormals: bool = True
    """Treat subnormal floats (below 1.2e-38 in float32) as zero in CPU arithmetic while the run
    trains (``torch.set_flush_denormal``). Adam's second-moment estimates of rarely used
    weights decay into that range, and the CPU computes on such numbers many times slower: with
    it, a small network's optimizer step runs up to four times faster. The values lost are far
    below Adam's epsilon. Set false for bit-compatibility with runs made without it."""
    networks: dict[str, str] = field(factory=dict)
    """Recorded by ``train(networks=...)`` (and ``train(policy)``): the parts of the networks
    that came from Python, as ``{"actor": "module:qualname"}`` of their class or factory. Never
    imported: loading or resuming the run needs them passed again (``networks=``)."""
    policy_class: str | None = None
    """Recorded by ``train(policy)`` when the policy object is of a subclass of the algorithm's
    own policy class: its ``module:qualname``. Never imported: loading or resuming the run needs
    the class passed again (``policy_class=``)."""
    init_from: dict[str, Any] | None = None
    """Recorded by ``train(init_from=RUN)`` (``--init-from RUN``): the run whose policy weights
    this run started from (``run``, its ``algo``, the ``checkpoint`` and its ``sha256``) and
    whether that run's data filled the replay buffer (``buffer``, ``data``). A new run with
    this config starts from the same checkpoint again; a resumed one continues its own."""


@define(kw_only=True)
class ExperimentConfig:
    """A whole run: the algorithm's name and config plus the env, buffer, trainer and run sections.

    ``algo`` is an instance of the algorithm spec's ``config`` class (None when it has none).
    """

    algo_name: str = field(validator=_non_empty_str)
    """Registry name of the algorithm."""
    algo: Any
    """The algorithm's own config instance."""
    env: EnvConfig = field(factory=EnvConfig)
    buffer: BufferConfig = field(factory=BufferConfig)
    trainer: TrainerConfig = field(factory=TrainerConfig)
    run: RunConfig = field(factory=RunConfig)


_SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "buffer": BufferConfig,
    "trainer": TrainerConfig,
    "run": RunConfig,
}
_SECTION_NAMES = ("algo", *_SECTIONS)


@define
class _NoOptions:
    """Stands in for the config class of a plugin that takes no options."""
