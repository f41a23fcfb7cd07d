"""The experiment: one run's components built by name from a resolved config, trained, checkpointed
and restored (``train`` and ``resume`` in :mod:`rlblocks.run` drive it).

:class:`Experiment` builds every component through the plugin registries (or, for an env id an
env family claims, has the family build the envs, policies, buffers and collectors), runs the
trainer and leaves a run directory that can be inspected and resumed::

    RUN_DIR/config.json      resolved config (feed it back with --config)
    RUN_DIR/plugins.json     versions of rlblocks, every plugin used, python, torch, gymnasium
    RUN_DIR/logs/            logger output (tensorboard, csv)
    RUN_DIR/checkpoints/     gen-NNNNNNNN/ (resume points: latest.pt, buffer.h5 of off-policy
                             runs, MANIFEST.json with checksums), CURRENT (the committed one),
                             best.pt (best test return) and best.pt.sha256
    RUN_DIR/result.json      best_test_return, solved, env_steps, gradient_steps, wall_seconds
                             (and agent_steps for multi-agent runs)
    RUN_DIR/tests.csv        one row per test: env step, wall seconds, test return statistics

An offline algorithm (spec ``training="offline"``) learns from the dataset ``buffer.dataset``
(an hdf5 file of :meth:`~rlblocks.replay.ReplayBuffer.save_hdf5`, or a Minari dataset) with the
:class:`~rlblocks.trainers.OfflineTrainer`: only test envs are made, the budget is
``trainer.max_gradient_steps``, checkpoints record the dataset's size and sha256 (never a copy)
and a resume reloads it from the path in ``config.json``. An online algorithm whose spec says
``uses_dataset`` (GAIL) trains as any online one and also gets the dataset, read and recorded
the same way, through its policy's ``set_dataset``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import random
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import torch

from rlblocks.collect import AsyncCollector, Collector
from rlblocks.contracts import (
    AsyncVectorEnv,
    BufferAbilities,
    CheckpointError,
    ConfigError,
    DuplicateComponentError,
    EpisodeCutBuffer,
    RandomBuffer,
    UnknownComponentError,
    VectorEnvAbilities,
)
from rlblocks.plugins import get_registry, make_plugin_manager
from rlblocks.run import _config as cfg
from rlblocks.run._agent import Agent
from rlblocks.run._checkpoint import (
    GenerationStore,
    from_plain,
    load_checkpoint,
    save_checkpoint,
    save_checkpoint_verified,
    sidecar_of,
    to_plain,
    write_json_verified,
)
from rlblocks.run._compose import (
    EnvSource,
    async_backend_problem,
    buffer_options,
    check_buffer_fits,
    check_torch_threads,
    check_training,
    env_run_hooks,
    env_spec,
    logger_configs,
    make_buffer,
    make_env_fns,
    make_policy,
    make_vector_env,
    options_dict,
    resolve_device,
    spec_lookup,
    stacked_space,
)
from rlblocks.run._dataset import (
    check_dataset_spaces,
    dataset_fingerprint,
    find_dataset,
    load_dataset,
)
from rlblocks.run._family import FamilyBuild, env_family
from rlblocks.run._init_from import init_buffer, init_weights
from rlblocks.run._minari import to_policy_actions
from rlblocks.run._rundir import (
    RESULT_FILE,
    RunDirLock,
    TestRecorder,
    _remove_failed_start,
    discard_replaced_run,
    put_back_run,
    refuse_symlinks,
    remove_stale_temporaries,
    set_aside_run,
)
from rlblocks.run._seeding import (
    _numpy_rng_state,
    _set_cuda_rng_state,
    _set_numpy_rng_state,
    _warn_stderr,
    denormals_flushed,
    seed_everything,
)
from rlblocks.trainers import (
    BaseTrainer,
    ConsoleReporter,
    OfflineTrainer,
    OffPolicyTrainer,
    OnPolicyTrainer,
    TrainResult,
)

#: Told once when a run collects asynchronously (its build; a resume builds it again).
ASYNC_NOT_REPRODUCIBLE = (
    "trainer.async_collect=true: this run is not bit-reproducible (which envs are back at each "
    "collect round depends on timing), so two runs with one seed, or a resumed run and the same "
    "run left alone, differ; set trainer.async_collect=false for reproducible runs"
)


def _dist_versions(specs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "components": {},
    }
    for kind, name in specs:
        try:  # the entry the run used, also for a qualified name@distribution
            info: Any = get_registry(kind).resolve(name)
        except (UnknownComponentError, DuplicateComponentError):
            info = None
        out["components"][f"{kind}:{name}"] = (
            {"distribution": info.distribution, "version": info.version} if info else None
        )
    try:
        out["rlblocks"] = metadata.version("rlblocks")
    except metadata.PackageNotFoundError:
        out["rlblocks"] = None
    return out


@contextlib.contextmanager
def _graceful_signals(trainer: BaseTrainer) -> Iterator[None]:
    """While training: the first SIGINT or SIGTERM asks the trainer to stop after the current
    iteration (it then writes its checkpoint); a second one interrupts at once."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    finishing = False  # a signal came after the budget was met: the run ends on its own

    def handler(signum: int, _frame: Any) -> None:
        nonlocal finishing
        name = signal.Signals(signum).name
        if trainer.stop_requested or finishing:
            raise KeyboardInterrupt
        if _budget_met(trainer):
            # this iteration ends the run anyway (its final test and checkpoint): a run that met
            # its budget is finished, not interrupted
            finishing = True
            print(
                f"\n{name}: the run has reached its budget ({trainer.budget_name}) and is "
                "finishing (its final test and checkpoint); send it again to stop at once",
                file=sys.stderr,
                flush=True,
            )
            return
        trainer.request_stop(f"interrupted by {name}")
        print(
            f"\n{name}: stopping after this iteration and writing a checkpoint "
            "(send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _budget_met(trainer: BaseTrainer) -> bool:
    """Whether ``trainer`` has spent its budget (``trainer.budget`` of its
    ``progress_counter``: env steps online, gradient steps offline)."""
    return trainer.budget is not None and trainer.progress >= int(trainer.budget)


def _finished_not_interrupted(result: TrainResult, trainer: BaseTrainer) -> None:
    """A stop signal that landed while the last iteration was spending the end of the budget:
    the budget was met, so the run finished (the stop reason says so, as for a run left alone)."""
    if str(result.stop_reason).startswith("interrupted") and _budget_met(trainer):
        result.stop_reason = f"reached {trainer.budget_name}={trainer.budget}"
        trainer.state.stop_reason = result.stop_reason






def _hook_list(hooks: Any) -> list[object]:
    """``hooks`` as a list, refused when it is no collection of hook objects (a single object
    or a number would otherwise fail deep inside, or be taken apart)."""
    if isinstance(hooks, str | bytes | Mapping) or not isinstance(hooks, Iterable):
        raise ConfigError(
            f"hooks must be a list of hook objects, got {type(hooks).__name__} {hooks!r:.60}; "
            "pass hooks=[obj] (each obj with rlblocks_* hook methods)"
        )
    return list(hooks)


class Experiment:
    """One run built from an :class:`~rlblocks.run.ExperimentConfig`."""

    def __init__(
        self,
        config: cfg.ExperimentConfig,
        run_dir: str | os.PathLike[str] | None,
        hooks: Iterable[object] = (),
        env_factory: Callable[[], gym.Env] | None = None,
        quiet: bool = False,
        overwrite: bool = False,
        train_fn: Callable[[int, int], None] | None = None,
        test_fn: Callable[[int, int], None] | None = None,
        networks: Mapping[str, Any] | None = None,
        policy: Any = None,
        policy_class: type | None = None,
        trust_imports: bool = False,
    ) -> None:
        self.config = config
        #: import what the run named in ``run.init_from`` names, whatever the trust rule says
        self.trust_imports = trust_imports
        #: the run's vector envs, once built (closed again when a start fails)
        self.train_envs: Any = None
        self.test_envs: Any = None
        #: the user's network parts (``train(networks=...)``), passed to ``make_policy``
        self.networks = dict(networks or {})
        #: a policy object to train instead of building one (``train(policy)``)
        self.given_policy = policy
        #: the subclass of the algorithm's policy class to build (resuming a run of one)
        self.policy_class = policy_class
        #: the trainer's ``train_fn(epoch, env_step)`` and ``test_fn(epoch, env_step)``
        self.train_fn = train_fn
        self.test_fn = test_fn
        #: clear the files of an earlier run in ``run_dir`` first (``train --overwrite``)
        self.overwrite = overwrite
        #: no console output at all (runs driven by tune or --seeds report their own lines)
        self.quiet = quiet
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.extra_hooks = _hook_list(hooks)
        #: builds the envs instead of ``config.env.id`` (``train(env=callable)``)
        self.env_factory = env_factory
        self.algo_spec = spec_lookup("algo", config.algo_name)
        #: the dataset the run learns from (``buffer.dataset``): the buffer of an offline run,
        #: a second buffer of an online one whose spec says ``uses_dataset``; None otherwise
        self.dataset: Any = None

    def stop_reward(self) -> float | None:
        c = self.config
        if c.trainer.stop_reward is not None:
            return c.trainer.stop_reward
        if env_family(c.env.id) is not None:
            return None  # an env family's envs declare no reward threshold
        try:
            return env_spec(c.env.id).reward_threshold
        except ConfigError:
            return None

    def build(self, resumed: bool = False) -> BaseTrainer:
        c = self.config
        seed = c.run.seed
        seed_everything(seed)
        if c.run.torch_threads > 0:
            check_torch_threads(c.run.torch_threads)
            torch.set_num_threads(c.run.torch_threads)
        # plugins are configured before anything is built (rlblocks_configure's contract)
        self.pm = make_plugin_manager(self._hook_objects())
        self.pm.hook.rlblocks_configure.call_historic(
            kwargs={"config": cfg.to_dict(c), "run_dir": self.run_dir}
        )
        env_opts = options_dict(c.env.options)
        source: EnvSource = self.env_factory if self.env_factory is not None else c.env.id
        training = self.algo_spec.training
        check_training(c, self.algo_spec)
        if training == "offline":
            return self._build_offline(source, env_opts, resumed)
        frames = c.buffer.stack_num
        family = None if self.env_factory is not None else env_family(c.env.id)
        device = resolve_device(c.run.device)
        buffer_kwargs = buffer_options(c.buffer)
        if buffer_kwargs["storage"] == "memmap" and buffer_kwargs["path"] is None:
            if self.run_dir is None:
                raise ConfigError(
                    "$.buffer.path: storage='memmap' needs a directory for the array files; set "
                    "buffer.path or give the run a directory"
                )
            buffer_kwargs["path"] = str(Path(self.run_dir) / "buffer")

        def run_buffer(lanes: int, name: str | None = None) -> Any:
            """A buffer with the run's settings and ``lanes`` chains of steps (one per env, or
            per agent slot); ``name`` (a policy's) keeps several buffers' files apart."""
            path = buffer_kwargs["path"]
            if name is not None and path is not None:
                path = str(Path(path) / name)
            options = {**buffer_kwargs, "path": path}
            return make_buffer(c.buffer.name, c.buffer.size, lanes, **options)

        made: list[Any] = []

        def run_policy(
            observation_space: gym.Space, action_space: gym.Space, state_space: Any = None
        ) -> Any:
            """The run's algorithm with its config and the user's networks, on its device (or
            the policy object the run was given)."""
            if made:  # a family builds several policies (env.policy_mapping)
                self._refuse_shared_networks()
            made.append(self._make_policy(observation_space, action_space, device, state_space))
            return made[-1]

        if family is not None:
            if c.run.init_from is not None:
                raise ConfigError(
                    f"$.run.init_from: the {family[0].name!r} family builds its own policies; "
                    "starting from another run's weights is for gymnasium's envs"
                )
            # an env family (a plugin: PettingZoo's multi-agent envs...) builds the run's parts
            parts = family[1].build(
                FamilyBuild(
                    config=c,
                    algo_spec=self.algo_spec,
                    seed=seed,
                    device=device,
                    make_policy=run_policy,
                    make_buffer=run_buffer,
                )
            )
            self.train_envs, self.test_envs = parts.train_envs, parts.test_envs
            self.policy, self.buffer = parts.policy, parts.buffer
            self._family_policies = (family, list(made), seed, device)
        else:
            # the buffer first: it needs no env, and a size that cannot hold the run fails
            # before thousands of envs are made
            self.buffer = run_buffer(c.env.num_envs)
            check_buffer_fits(c, self.algo_spec, self.buffer)
            train_opts = dict(env_opts)
            if c.trainer.async_collect and c.env.backend == "auto":
                train_opts["asynchronous"] = True  # auto then picks among async backends
            self.train_envs = make_vector_env(
                c.env.backend,
                source,
                c.env.num_envs,
                make_kwargs=c.env.make_kwargs,
                wrappers=[*c.env.wrappers, *c.env.train_wrappers],
                **train_opts,
            )
            self.test_envs = self._make_test_envs(source, env_opts)
            space_o = stacked_space(self.train_envs.observation_space, frames)
            self.policy = run_policy(space_o, self.train_envs.action_space)
            self.policy.seed(seed)
            if c.run.init_from is not None and not resumed:
                self._init_from(with_buffer=True)
            if self.algo_spec.uses_dataset:
                self._give_dataset(space_o, self.train_envs.action_space, resumed)
        # a family may give a buffer per policy (a mapping of them): each is seeded and checked
        buffers = list(self.buffer.values()) if isinstance(self.buffer, Mapping) else [self.buffer]
        abilities = BufferAbilities.of(buffers[0])
        # off-policy recurrent learners sample windows from replay; on-policy ones (recurrent
        # PPO) get the whole buffer in time order and cut their own windows
        check_buffer_fits(c, self.algo_spec, buffers[0])
        if abilities.seedable:
            for i, member in enumerate(buffers):
                member.seed(seed + 7919 * i)
        if abilities.env_attached:
            self._attach_probe_env()
        t = c.trainer
        # train and test envs get disjoint seed ranges (a resumed run continues both streams)
        if family is not None:
            self.train_collector, self.test_collector = parts.train_collector, parts.test_collector
        else:
            collector_cls = Collector
            if t.async_collect:
                if not isinstance(self.train_envs, AsyncVectorEnv):  # auto chose such a backend
                    what = VectorEnvAbilities.of(self.train_envs).auto_choice or (
                        f"the {c.env.backend!r} backend"
                    )
                    raise ConfigError(f"$.trainer.async_collect: {async_backend_problem(what)}")
                collector_cls = AsyncCollector
            self.train_collector = collector_cls(
                self.policy, self.train_envs, self.buffer, seed=seed, frame_stack=frames,
                info_keys=c.env.info_keys,
            )  # fmt: skip
            self.test_collector = Collector(
                self.policy,
                self.test_envs,
                None,
                exploration=False,
                seed=seed + 100_000,
                frame_stack=frames,
            )
        if t.async_collect:  # said once, as the run is built (a family's collectors too)
            warnings.warn(ASYNC_NOT_REPRODUCIBLE, UserWarning, stacklevel=2)
        common: dict[str, Any] = {
            **self._trainer_options(),
            "max_env_steps": t.max_env_steps,
            "test_in_training": t.test_in_training,
            "batch_mode": t.batch_mode,
            "rollout_fragment_length": t.rollout_fragment_length,
        }
        self.trainer: BaseTrainer
        if training == "on-policy":
            self.trainer = OnPolicyTrainer(
                self.policy,
                self.train_collector,
                self.test_collector,
                self.buffer,
                step_per_collect=t.step_per_collect,
                episode_per_collect=t.episode_per_collect,
                repeat_per_collect=t.repeat_per_collect,
                **common,
            )
        else:
            self.trainer = OffPolicyTrainer(
                self.policy,
                self.train_collector,
                self.test_collector,
                self.buffer,
                step_per_collect=t.step_per_collect,
                update_per_step=t.update_per_step,
                warmup_steps=t.warmup_steps,
                **common,
            )
        self.trainer.run_dir = self.run_dir
        return self.trainer

    def _build_offline(
        self, source: EnvSource, env_opts: dict[str, Any], resumed: bool
    ) -> BaseTrainer:
        """The run of an offline algorithm: its dataset as the buffer, test envs only (no
        training env, no training collector) and an :class:`OfflineTrainer` whose budget and
        schedules count gradient steps."""
        c, t, seed = self.config, self.config.trainer, self.config.run.seed
        self.train_envs = None
        self.train_collector: Any = None
        self.test_envs = self._make_test_envs(source, env_opts)
        self.buffer = self.dataset = self._load_dataset(resumed)
        frames = BufferAbilities.of(self.buffer).stack_num
        if c.buffer.stack_num not in (1, frames):
            raise ConfigError(
                f"$.buffer.stack_num: the dataset {c.buffer.dataset} stacks {frames} frame(s) "
                f"and the config asks for {c.buffer.stack_num}; leave buffer.stack_num out (the "
                "dataset's own stacking is used)"
            )
        if frames != c.buffer.stack_num:  # config.json records it: rlblocks.load stacks so too
            self.config = c = attrs.evolve(c, buffer=attrs.evolve(c.buffer, stack_num=frames))
        space_o = stacked_space(self.test_envs.observation_space, frames)
        space_a = self.test_envs.action_space
        check_dataset_spaces(self.buffer, space_o, space_a, str(c.buffer.dataset), c.env.id)
        self.policy = self._make_policy(space_o, space_a, resolve_device(c.run.device))
        self.policy.seed(seed)
        if self.dataset_env_actions:  # a Minari dataset holds env actions: to policy units
            to_policy_actions(self.buffer, self.policy)
        if c.run.init_from is not None and not resumed:
            self._init_from(with_buffer=False)
        abilities = BufferAbilities.of(self.buffer)
        if abilities.seedable:
            self.buffer.seed(seed)
        if abilities.env_attached:
            self._attach_probe_env()
        self.test_collector = Collector(
            self.policy, self.test_envs, None, exploration=False, seed=seed + 100_000,
            frame_stack=frames,
        )  # fmt: skip
        assert t.max_gradient_steps is not None  # check_training refuses a run without one
        self.trainer = OfflineTrainer(
            self.policy,
            self.test_collector,
            self.buffer,
            max_gradient_steps=t.max_gradient_steps,
            step_per_round=t.step_per_round,
            **self._trainer_options(),
        )
        self.trainer.run_dir = self.run_dir
        return self.trainer

    def _init_from(self, with_buffer: bool) -> None:
        """A new run started from another run (``run.init_from``): that run's weights into the
        policy and, when asked, its data into the replay buffer."""
        record = self.config.run.init_from
        assert record is not None
        init_weights(self.policy, record, self.config.algo_name, trusted=self.trust_imports)
        if with_buffer and record.get("buffer"):
            init_buffer(self.buffer, self.policy, record, trusted=self.trust_imports)

    def _give_dataset(self, space_o: gym.Space, space_a: gym.Space, resumed: bool) -> None:
        """An online algorithm that also learns from a dataset (``uses_dataset``): read
        ``buffer.dataset`` (checked against the env's spaces, seeded, fingerprinted for resume)
        and hand it to the policy."""
        c = self.config
        self.dataset = self._load_dataset(resumed)
        check_dataset_spaces(self.dataset, space_o, space_a, str(c.buffer.dataset), c.env.id)
        if self.dataset_env_actions:  # a Minari dataset holds env actions: to policy units
            to_policy_actions(self.dataset, self.policy)
        if BufferAbilities.of(self.dataset).seedable:
            self.dataset.seed(c.run.seed + 104_729)
        self.policy.set_dataset(self.dataset)

    def _result_agent(self) -> Any:
        """The trained policy as an agent: an env family's own agent (acting per agent, as
        ``rlblocks.load`` returns it) around the very policies trained, else :class:`Agent`."""
        c = self.config
        built = getattr(self, "_family_policies", None)
        if built is None or not built[0][0].loadable:  # the family has no agent of its own
            return Agent(self.policy, c, env_factory=self.env_factory)
        family, policies, seed, device = built
        trained = iter(policies)

        def reuse(*_spaces: Any, **_kwargs: Any) -> Any:
            return next(trained)  # the family asks for them in the order it built them

        def no_buffer(*_args: Any, **_kwargs: Any) -> Any:
            raise ConfigError("an agent acts and has no replay buffer")

        return family[1].agent(
            FamilyBuild(
                config=c, algo_spec=self.algo_spec, seed=seed, device=device,
                make_policy=reuse, make_buffer=no_buffer,
            )
        )  # fmt: skip

    def _make_policy(
        self, space_o: gym.Space, space_a: gym.Space, device: str, state_space: Any = None
    ) -> Any:
        """The run's policy: the policy object it was given (its spaces must be the env's), or
        one built by name with the user's networks."""
        c = self.config
        policy = self.given_policy
        if policy is None:
            return make_policy(
                c.algo_name, space_o, space_a, device=device, config=c.algo,
                state_space=state_space, policy_class=self.policy_class, **self.networks,
            )  # fmt: skip
        for what, own, env_space in (
            ("observation", policy.observation_space, space_o),
            ("action", policy.action_space, space_a),
        ):
            if own != env_space:
                raise ConfigError(
                    f"the policy was built for the {what} space {own}, and the env {c.env.id} "
                    f"has {env_space}; build it with the env's spaces"
                )
        return policy

    def _refuse_shared_networks(self) -> None:
        """Several policies (``env.policy_mapping``) cannot share one module or policy object."""
        if self.given_policy is not None:
            raise ConfigError(
                "env.policy_mapping trains several policies, and one policy object was given; "
                "pass the algorithm's name (and networks as factories) instead"
            )
        shared = [part for part, net in self.networks.items() if isinstance(net, torch.nn.Module)]
        if shared:
            raise ConfigError(
                f"env.policy_mapping trains several policies, and the {shared[0]} was given as "
                "one module, which they cannot share; pass a factory "
                "(lambda observation_space, action_space: MyNet(...)) instead"
            )

    def _make_test_envs(self, source: EnvSource, env_opts: dict[str, Any]) -> Any:
        """The test envs: ``env.num_test_envs`` of the run's env with its shared wrappers (not
        the training-only ones), online and offline alike."""
        c = self.config
        return make_vector_env(
            c.env.backend,
            source,
            c.env.num_test_envs,
            make_kwargs=c.env.make_kwargs,
            wrappers=c.env.wrappers,
            **env_opts,
        )

    def _attach_probe_env(self) -> None:
        """Buffers that need the env's own functions (hindsight relabelling takes
        ``compute_reward`` from a goal env) get a local instance of the run's env."""
        c = self.config
        self._probe_env = make_env_fns(
            self.env_factory or c.env.id, 1, c.env.make_kwargs, c.env.wrappers
        )[0]()
        self.buffer.attach_env(self._probe_env)

    def _trainer_options(self) -> dict[str, Any]:
        """What every trainer takes alike from the config and the run: batch size, the test
        schedule and stop rule, checkpoints (none without a run directory), hooks, the finite
        check."""
        t, saved = self.config.trainer, self.run_dir is not None
        return {
            "batch_size": t.batch_size,
            "test_interval": t.test_interval,
            "test_episodes": t.test_episodes,
            "log_interval": t.log_interval,
            "test_screen_episodes": t.test_screen_episodes,
            "test_at_start": t.test_at_start,
            "stop_reward": self.stop_reward(),
            "checkpoint_interval": t.checkpoint_interval if saved else 0,
            "plugin_manager": self.pm,
            "checkpoint_fn": self.save if saved else None,
            "best_fn": self.save_best if saved else None,
            "on_nonfinite": t.on_nonfinite,
            "train_fn": self.train_fn,
            "test_fn": self.test_fn,
        }

    def _load_dataset(self, resumed: bool) -> Any:
        """Read ``buffer.dataset`` (an rlblocks hdf5 file or a Minari dataset) into a buffer
        (never executing code the file names: HER's ``compute_reward`` and the like are
        refused) and fingerprint it (size, sha256) so a resume can tell whether it is still the
        dataset the run trained on."""
        c = self.config
        path = Path(str(c.buffer.dataset))
        if find_dataset(path) is None and resumed:
            raise CheckpointError(
                f"the dataset {path} this run trained on is gone (config.json names it in "
                "buffer.dataset); put it back, or point the run at a copy of it with "
                f"`rlblocks resume {shlex.quote(str(self.run_dir))} --set buffer.dataset=FILE`"
            )
        storage_path = None
        if c.buffer.storage == "memmap":
            if c.buffer.path is None and self.run_dir is None:
                raise ConfigError(
                    "$.buffer.path: storage='memmap' needs a directory for the array files; set "
                    "buffer.path or give the run a directory"
                )
            storage_path = c.buffer.path or str(Path(str(self.run_dir)) / "buffer")
        loaded = load_dataset(path, stack_num=c.buffer.stack_num, storage=c.buffer.storage,
                              storage_path=storage_path)  # fmt: skip
        self.dataset_fingerprint = dataset_fingerprint(loaded.path)
        self.dataset_env_actions = loaded.env_actions
        if len(loaded.buffer) == 0:
            raise ConfigError(
                f"$.buffer.dataset: {path} holds no transitions; save a filled buffer "
                "(ReplayBuffer.save_hdf5) and pass that file with --dataset"
            )
        return loaded.buffer

    def _step_unit(self) -> str:
        """What an online run's progress and budget count: ``"agent step"`` for a multi-agent
        run with ``trainer.count_steps_by=agent_steps``, else ``"env step"``."""
        c = self.config
        if c.trainer.count_steps_by == "agent_steps" and env_family(c.env.id) is not None:
            return "agent step"
        return "env step"

    def _hook_objects(self) -> list[object]:
        c = self.config
        objs: list[object] = []
        reporter: ConsoleReporter | None = None
        if not self.quiet:
            offline = self.algo_spec.training == "offline"
            total = c.trainer.max_gradient_steps if offline else c.trainer.max_env_steps
            unit = "gradient step" if offline else self._step_unit()
            reporter = ConsoleReporter(int(total or 0), progress=c.run.progress,
                                       env_factory=c.env.factory, unit=unit,
                                       networks=c.run.networks)  # fmt: skip
            objs.append(reporter)
        log_dir = self.run_dir / "logs" if self.run_dir is not None else None
        self.test_recorder: TestRecorder | None = None
        if self.run_dir is not None:
            self.test_recorder = TestRecorder(self.run_dir, lambda: self.trainer.state)
            objs.append(self.test_recorder)
        for name, options in logger_configs(c.run).items():
            if log_dir is None:
                raise ConfigError(f"logger {name!r} needs a run directory; pass run_dir")
            logger = get_registry("logger").load(name)(log_dir, options)
            objs.append(logger)
            if reporter is not None:
                reporter.loggers[name] = logger
        if self.env_factory is None and c.env.factory is None:
            # what the env's class asks for on the trainer's side (a game's self-play)
            # (a module:EnvId id's module is imported by now when the run may import it)
            objs.extend(env_run_hooks(c.env.id, cfg.to_dict(c), trusted=False))
        objs.extend(self.extra_hooks)
        return objs

    # -- checkpoints -------------------------------------------------------------------------
    def save(self, trainer: BaseTrainer) -> None:
        """Write the resume point: policy weights and extra state, trainer counters, RNGs, the
        buffer, and hook contributions (``best.pt`` is written by :meth:`save_best`)."""
        assert self.run_dir is not None
        ckpt_dir = self.run_dir / "checkpoints"
        payload: dict[str, Any] = {
            "format": 2,
            "policy": self.policy.state_dict(),
            "policy_extra": self.policy.extra_state(),
            "trainer": trainer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            # the GPUs' own generators: a CUDA run draws its exploration and sampled actions there
            "cuda_rng": (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None),
            "python_rng": random.getstate(),
            "numpy_rng": _numpy_rng_state(),
            # random streams, counters, and the envs with their running episodes
            "collectors": {
                # an offline run has no training collector
                "train": None
                if self.train_collector is None
                else to_plain(self.train_collector.state_dict()),
                "test": to_plain(self.test_collector.state_dict()),
            },
            "plugins": {},
        }
        if self.dataset is not None:
            # the dataset is never copied: its fingerprint, to check it on resume, and where the
            # sampling stream stands, so a resumed run draws the batches it would have drawn
            payload["dataset"] = dict(self.dataset_fingerprint)
            if isinstance(self.dataset, RandomBuffer):
                payload["dataset_rng"] = json.dumps(self.dataset.rng.bit_generator.state)
        self.pm.hook.rlblocks_checkpoint_save(checkpoint=payload["plugins"], trainer=trainer)
        payload["plugins"] = to_plain(payload["plugins"])  # numpy arrays as loadable values
        # an on-policy buffer is empty between updates: nothing worth saving
        off_policy = self.algo_spec.training == "off-policy"
        with_buffer = (
            off_policy and self.config.run.save_buffer and trainer.buffer_abilities.persistent
        )

        def write(gen: Path) -> dict[str, Any]:
            save_checkpoint(gen / "latest.pt", payload)
            if with_buffer:
                self.buffer.save_hdf5(gen / "buffer.h5")
            return {
                "env_step": int(trainer.state.env_step),
                "gradient_step": int(trainer.state.gradient_step),
            }

        # the weights, trainer state and buffer of one moment, committed together
        GenerationStore(ckpt_dir).commit(write)

    def save_best(self, trainer: BaseTrainer) -> None:
        """Write ``best.pt`` right after a test beat every earlier one: the weights that scored
        it (and the policy's extra state), with the score and the env step."""
        assert self.run_dir is not None
        st = trainer.state
        save_checkpoint_verified(
            self.run_dir / "checkpoints" / "best.pt",
            {
                "format": 1,
                "policy": self.policy.state_dict(),
                "policy_extra": self.policy.extra_state(),
                "test_return": float(st.best_test_return),
                "env_step": int(st.env_step),
            },
        )

    def restore(self, trainer: BaseTrainer) -> None:
        assert self.run_dir is not None
        gen = GenerationStore(self.run_dir / "checkpoints").latest_good(warn=_warn_stderr)
        if gen is not None:
            ckpt_file, buffer_file = gen / "latest.pt", gen / "buffer.h5"
        else:  # the single-file layout of rlblocks 0.1
            ckpt_file = self.run_dir / "checkpoints" / "latest.pt"
            buffer_file = self.run_dir / "buffer.h5"
            if not ckpt_file.is_file():
                raise CheckpointError(
                    f"{self.run_dir} has no checkpoint to continue from: the run stopped before "
                    "its first one (every trainer.checkpoint_interval env steps); start it "
                    f"again with `rlblocks train {self.config.algo_name} --run-dir "
                    f"{shlex.quote(str(self.run_dir))} --overwrite`"
                )
        payload = load_checkpoint(ckpt_file)
        try:
            self.policy.load_state_dict(payload["policy"])
        except RuntimeError as exc:
            lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
            detail = lines[1] if len(lines) > 1 else lines[0]
            raise CheckpointError(
                f"{ckpt_file} does not fit {self.config.algo_name}'s networks as configured "
                f"({detail}); resume with the network settings the run was trained with"
            ) from exc
        self.policy.load_extra_state(payload.get("policy_extra", {}))
        trainer.load_state_dict(payload["trainer"])
        # a resumed run earns "solved" again at its next test (the stop reward may have changed)
        trainer.state.solved = False
        trainer.state.stop_reason = ""
        if self.dataset is not None:
            self._check_dataset_unchanged(payload, ckpt_file)
        if self.test_recorder is not None:
            column = (
                "gradient_steps"
                if self.algo_spec.training == "offline"
                else "agent_steps"
                if self._step_unit() == "agent step"
                else "env_step"
            )
            self.test_recorder.truncate_after(trainer.progress, column=column)
        if "torch_rng" in payload:
            torch.set_rng_state(payload["torch_rng"])
        _set_cuda_rng_state(payload.get("cuda_rng"))
        if "python_rng" in payload:
            state = payload["python_rng"]
            random.setstate((state[0], tuple(state[1]), state[2]))
        if "numpy_rng" in payload:
            _set_numpy_rng_state(payload["numpy_rng"])
        self.pm.hook.rlblocks_checkpoint_load(
            checkpoint=from_plain(payload.get("plugins", {})), trainer=trainer
        )
        collectors = payload.get("collectors")
        if self.train_collector is None:  # offline: only the test envs continue
            if isinstance(collectors, Mapping) and self._restore_collector(
                self.test_collector, collectors["test"]
            ):
                _warn_stderr("the test envs start new episodes from a fresh seed")
            return
        if isinstance(collectors, Mapping):
            restart = self._restore_collector(self.train_collector, collectors["train"])
            if self._restore_collector(self.test_collector, collectors["test"]) and not restart:
                _warn_stderr("the test envs start new episodes from a fresh seed")
            st = trainer.state
            taken = getattr(self.train_collector, "total_env_steps", None)
            agents = getattr(self.train_collector, "total_agent_steps", None)
            if st.agent_steps is None and isinstance(taken, int) and isinstance(agents, int):
                # a multi-agent checkpoint from before the trainer counted both kinds of
                # step: its collector's totals (its own counters, checkpointed) have them
                st.env_steps_taken, st.agent_steps = taken, agents
        else:  # a checkpoint of rlblocks 0.1: the collectors start new episodes
            self.train_collector.restart_episodes(self.config.run.seed + 7919)
            restart = "the checkpoint predates env snapshots"
        if restart:
            _warn_stderr(f"running training episodes restart on resume: {restart}")
        if buffer_file.is_file() and trainer.buffer_abilities.persistent:
            # into the run's own buffer, so it keeps its storage kind (memmap stays memmap)
            self.buffer.read_hdf5(buffer_file)
            # envs that restart their episodes: episodes left open in the file end here
            if restart and isinstance(self.buffer, EpisodeCutBuffer):
                self.buffer.truncate_unfinished()

    def _check_dataset_unchanged(self, payload: Mapping[str, Any], ckpt_file: Path) -> None:
        """A resumed run that learns from a dataset (offline, or ``uses_dataset``) must learn
        from the very file it trained on: its size and sha256 must match what the checkpoint
        recorded; then the sampling stream continues."""
        saved = payload.get("dataset")
        now = self.dataset_fingerprint
        if not isinstance(saved, Mapping):
            raise CheckpointError(
                f"{ckpt_file} records no dataset, so this run cannot check that "
                f"{now['path']} is the file it trained on; start it again with --overwrite"
            )
        if (saved.get("size"), saved.get("sha256")) != (now["size"], now["sha256"]):
            raise CheckpointError(
                f"the dataset {now['path']} changed since the run's checkpoint (then "
                f"{saved.get('size')} bytes, sha256 {str(saved.get('sha256'))[:12]}..., now "
                f"{now['size']} bytes, sha256 {now['sha256'][:12]}...); resume with the file the "
                "run trained on (put it back, or point the run at a copy with `rlblocks resume "
                f"{self.run_dir} --set buffer.dataset=FILE`), or train a new run on the new file"
            )
        rng_state = payload.get("dataset_rng")
        if rng_state is not None and isinstance(self.dataset, RandomBuffer):
            self.dataset.rng.bit_generator.state = json.loads(rng_state)

    def _reopen_finished_run(self) -> None:
        """A finished run continued with a larger budget is live again until it writes a new
        result: its ``result.json`` goes once the run is rebuilt and restored (a resume that
        fails before that leaves the run as finished as it was)."""
        if self.run_dir is not None:
            (self.run_dir / RESULT_FILE).unlink(missing_ok=True)
            sidecar_of(self.run_dir / RESULT_FILE).unlink(missing_ok=True)

    def _restore_collector(self, collector: Collector, saved: Any) -> str:
        """Continue ``collector`` from its checkpointed state; "" when its episodes continue,
        else why they restart."""
        try:
            return collector.load_state_dict(from_plain(saved))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"the collector state in the checkpoint does not fit this run ({exc}); resume "
                "with the env settings the run was trained with"
            ) from exc

    def run(self, resumed: bool = False) -> TrainResult:
        """Build (and on resume restore) the run, train it, write its result. The run directory
        is locked for the whole run; SIGINT and SIGTERM stop it after the current iteration
        with a checkpoint (a second one stops at once)."""
        lock = RunDirLock(self.run_dir) if self.run_dir is not None else None
        # a new run in a directory without a run: what a failed start creates there goes again
        before: set[str] | None = None
        made_dir = self.run_dir is not None and not self.run_dir.exists()
        rd = self.run_dir
        if rd is not None and not resumed and not (rd / "config.json").is_file():
            before = set(os.listdir(rd)) if rd.is_dir() else set()
        had_lock = rd is not None and (rd / ".lock").exists()  # the lock file stays once made
        self._started = False
        self._replaced: Path | None = None  # the run --overwrite replaces, until this one starts
        if lock is not None:
            lock.acquire()
        failed_start = False
        try:
            if rd is not None:
                refuse_symlinks(rd)  # a run writes through no link inside its directory
                if self.overwrite and not resumed:
                    self._replaced = set_aside_run(rd)
                    if before is None:  # what the new run creates is measured from here
                        before = {n for n in os.listdir(rd) if had_lock or n != ".lock"}
                remove_stale_temporaries(rd)
            return self._run(resumed)
        except BaseException:
            failed_start = not self._started
            raise
        finally:
            if lock is not None:
                lock.release()
            if failed_start and rd is not None and before is not None:
                _remove_failed_start(rd, before, made_dir)
            if failed_start and rd is not None and self._replaced is not None:
                put_back_run(rd, self._replaced)  # a failed start loses nothing

    def _run(self, resumed: bool) -> TrainResult:
        self.pm: Any = None
        try:
            trainer = self.build(resumed=resumed)
            if resumed:
                self.restore(trainer)
                self._reopen_finished_run()
        except BaseException as exc:
            for venv in (self.train_envs, self.test_envs):
                if venv is not None:
                    venv.close()
            if self.pm is not None:
                try:
                    self.pm.hook.rlblocks_exception(exc=exc, where="setup")
                except Exception as hook_error:
                    raise hook_error from exc
            raise
        c = self.config
        self._started = True  # from here on the run's files are its own
        if self._replaced is not None:  # the new run is built: the one it replaces goes now
            discard_replaced_run(self._replaced)
            self._replaced = None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            cfg.write_config(c, self.run_dir / "config.json")
            write_json_verified(
                self.run_dir / "plugins.json",
                _dist_versions(
                    [("algo", c.algo_name), ("env", c.env.backend), ("buffer", c.buffer.name)]
                    + [("logger", n) for n in c.run.loggers]
                ),
            )
        self.pm.hook.rlblocks_run_start(
            config=cfg.to_dict(c), run_dir=self.run_dir, resumed=resumed
        )
        try:
            with _graceful_signals(trainer), denormals_flushed(c.run.flush_denormals):
                result = trainer.run()
        finally:
            if self.train_envs is not None:  # an offline run has none
                self.train_envs.close()
            self.test_envs.close()
        _finished_not_interrupted(result, trainer)
        result.run_dir = str(self.run_dir) if self.run_dir is not None else None
        result.agent = self._result_agent()
        if self.run_dir is not None:
            write_json_verified(self.run_dir / "result.json", _json_safe(result.to_dict()))
        self.pm.hook.rlblocks_run_end(result=result.to_dict(), run_dir=self.run_dir)
        return result


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}
