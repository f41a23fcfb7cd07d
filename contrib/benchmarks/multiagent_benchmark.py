#!/usr/bin/env python
"""Multi-agent learners on MPE cooperative navigation: rlblocks against BenchMARL, in one run.

Each contender trains MAPPO (QMIX, and the continuous-action MADDPG and MASAC) on the same task
for the same number of env steps, then its final policy plays the same number of greedy test
episodes. The table gives the final mean
per-agent return and the training wall seconds, medians over seeds, and rlblocks' ratios to
BenchMARL's.

The task, the same for both: ``mpe2.simple_spread_v3`` (cooperative navigation), N=3 agents,
max_cycles=25, local_ratio=0.5 (the env's default, and BenchMARL's setting); discrete actions
for MAPPO and QMIX, continuous moves (``continuous_actions=True``) for MADDPG, MATD3 and MASAC.
BenchMARL's own task config (``conf/task/pettingzoo/simple_spread.yaml``) has max_cycles=100 and
prefers continuous actions; both are set here to rlblocks' MPE settings so that one episode is
the same thing for both. PettingZoo 1.25+ moved MPE into the ``mpe2`` package and TorchRL's
``PettingZooEnv`` (which BenchMARL uses) still looks for ``pettingzoo.mpe``; this script points
TorchRL's env table at ``mpe2.simple_spread_v3``, so both libraries step the same env code.

Returns: rlblocks' IPPO/MAPPO report the mean per-agent return; its QMIX, MADDPG and MASAC
(joint views of the team) report the team return (the sum of the agents' rewards), divided here
by N. BenchMARL's rollouts hold every agent's
reward: summed over the episode, averaged over agents. All rows are mean per-agent returns.

Settings: each library with its own defaults for this algorithm, only the budget, the seed and
the task set here.

* rlblocks: ``rlblocks.train(algo, ...)`` with the algorithm's defaults (the IPPO/MAPPO presets
  in ``plugins/algos/ippo/.../presets.py`` and ``mappo/_spec.py``; QMIX's in
  ``plugins/algos/qmix/.../presets.py``; MADDPG's and MASAC's in
  ``plugins/algos/maddpg/.../presets.py``; all three with N raised from 2 to 3), one test at the
  end. ``matd3`` is MADDPG's preset with ``algo.td3=true``; BenchMARL 1.5.2 has no MATD3, so it
  runs only with ``--frameworks rlblocks``.
* BenchMARL 1.5.2 (TorchRL 0.11.1): its YAML defaults (``conf/experiment/base_experiment.yaml``,
  ``conf/algorithm/{mappo,qmix,maddpg,masac}.yaml``, ``conf/model/layers/mlp.yaml``), with
  ``max_n_frames`` set to the budget, CPU devices, no loggers, no rendering and no evaluation
  during training; after training, ``evaluation_episodes`` greedy (deterministic) episodes.

Wall seconds: training only (building envs and networks and the final test excluded), in a
fresh subprocess per trial with torch limited to ``--torch-threads`` threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _trials import finite, gist, run_json_trial

FRAMEWORKS = ("rlblocks", "benchmarl")
ALGOS = ("mappo", "qmix", "maddpg", "masac", "matd3")
#: the centralised-critic learners of continuous moves: MPE with ``continuous_actions=True``
CONTINUOUS = ("maddpg", "masac", "matd3")
#: the learners whose rlblocks result is the team return (a joint view): divided by N
TEAM_RETURN = ("qmix", *CONTINUOUS)
N_AGENTS = 3
MAX_CYCLES = 25
SPREAD = "mpe2.simple_spread_v3:parallel_env"


def trial_rlblocks(algo: str, seed: int, steps: int, episodes: int) -> dict[str, Any]:
    """Train rlblocks' ``algo`` for ``steps`` env steps; test its final policy once."""
    import rlblocks

    overrides = [
        f"trainer.test_interval={steps}",
        f"trainer.test_episodes={episodes}",
        f"env.make_kwargs.N={N_AGENTS}",
        f"env.make_kwargs.max_cycles={MAX_CYCLES}",
    ]
    name = algo
    if algo in CONTINUOUS:
        overrides.append("env.make_kwargs.continuous_actions=true")
    if algo == "matd3":  # MADDPG's twin critics, target smoothing and delayed actors
        name = "maddpg"
        overrides.append("algo.td3=true")
    with tempfile.TemporaryDirectory() as tmp:
        result = rlblocks.train(
            name, env=SPREAD, seed=seed, max_env_steps=steps, loggers=[], progress=False,
            quiet=True, run_dir=Path(tmp) / "run", overrides=overrides,
        )  # fmt: skip
    ret = result.last_test_return
    if algo in TEAM_RETURN:  # the joint view reports the team's return: the sum over agents
        ret = ret / N_AGENTS
    return {
        "return": finite(ret),
        "seconds": result.wall_seconds - result.test_seconds,
        "env_steps": result.env_steps,
    }


def _torchrl_sees_mpe2() -> None:
    """Point TorchRL's PettingZoo env table at mpe2 (PettingZoo 1.27 has no ``pettingzoo.mpe``)."""
    import torchrl.envs.libs.pettingzoo as tpz
    from mpe2 import simple_spread_v3

    tpz._load_available_envs = lambda: {"mpe/simple_spread_v3": simple_spread_v3}


def trial_benchmarl(algo: str, seed: int, steps: int, episodes: int) -> dict[str, Any]:
    """Train BenchMARL's ``algo`` with its defaults for ``steps`` frames (env steps)."""
    _torchrl_sees_mpe2()
    from benchmarl.algorithms import MaddpgConfig, MappoConfig, MasacConfig, QmixConfig
    from benchmarl.environments import PettingZooTask
    from benchmarl.experiment import Callback, Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    task = PettingZooTask.SIMPLE_SPREAD.get_from_yaml()
    task.config.update({"N": N_AGENTS, "max_cycles": MAX_CYCLES, "local_ratio": 0.5})
    config = ExperimentConfig.get_from_yaml()
    config.max_n_frames = steps
    config.prefer_continuous_actions = algo in CONTINUOUS
    config.loggers = []
    config.create_json = False
    config.render = False
    config.evaluation = False
    config.checkpoint_at_end = False
    config.evaluation_episodes = episodes
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    configs = {"mappo": MappoConfig, "qmix": QmixConfig, "maddpg": MaddpgConfig,
               "masac": MasacConfig}  # fmt: skip
    algorithm = configs[algo].get_from_yaml()

    class Keep(Callback):
        """Keeps the rollouts of the last evaluation."""

        rollouts: ClassVar[list[Any]] = []

        def on_evaluation_end(self, rollouts: list[Any]) -> None:
            Keep.rollouts = list(rollouts)

    # BenchMARL pickles its callbacks: the class must be found by name in this module
    Keep.__qualname__ = Keep.__name__ = "_KeepRollouts"
    globals()["_KeepRollouts"] = Keep

    with tempfile.TemporaryDirectory() as tmp:
        config.save_folder = tmp
        experiment = Experiment(
            task=task, algorithm_config=algorithm, model_config=MlpConfig.get_from_yaml(),
            critic_model_config=MlpConfig.get_from_yaml(), seed=seed, config=config,
            callbacks=[Keep()],
        )  # fmt: skip
        start = time.perf_counter()
        experiment.run()
        seconds = time.perf_counter() - start
        experiment._evaluation_loop()  # the final policy, greedy, `episodes` episodes
    returns = []
    for r in Keep.rollouts:
        done = r["next", "done"].reshape(r.batch_size[0], -1).any(-1).nonzero()
        end = int(done[0]) + 1 if len(done) else r.batch_size[0]
        # every group's agents (one group, "agent", here): (time, agents, 1) each
        reward = [r["next", group, "reward"][:end] for group in experiment.group_map]
        returns.append(float(sum(x.sum() for x in reward)) / N_AGENTS)
    return {
        "return": statistics.fmean(returns) if returns else None,
        "seconds": seconds,
        "env_steps": experiment.total_frames,
        "test_episodes": len(returns),
    }


TRIALS = {"rlblocks": trial_rlblocks, "benchmarl": trial_benchmarl}


def _median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None and "error" not in r]
    return statistics.median(values) if values else None


def _cell(x: float | None, fmt: str) -> str:
    return "error" if x is None else format(x, fmt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--algos", default="mappo", help=f"comma-separated, from {','.join(ALGOS)}"
    )
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--steps", type=int, default=18_000, help="env steps per trial")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=50, help="final greedy test episodes")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per trial")
    parser.add_argument("--json", type=Path, help="write every trial's result here")
    parser.add_argument("--_trial", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--_algo", choices=ALGOS, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._trial:  # child process: one trial, one JSON line on stdout
        import torch

        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        out = TRIALS[args._trial](args._algo, args._seed, args.steps, args.episodes)
        print(json.dumps(out), flush=True)
        return

    algos = [a for a in args.algos.split(",") if a]
    frameworks = [f for f in args.frameworks.split(",") if f]
    for name, known in (("--algos", ALGOS), ("--frameworks", FRAMEWORKS)):
        bad = [x for x in (algos if name == "--algos" else frameworks) if x not in known]
        if bad:
            parser.error(f"{name}: unknown {bad}; choose from {','.join(known)}")
    if "matd3" in algos and "benchmarl" in frameworks:
        parser.error(
            "--algos matd3: BenchMARL 1.5.2 has no MATD3; run it with --frameworks rlblocks "
            "(and compare with --algos maddpg's BenchMARL row)"
        )
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    results: list[dict[str, Any]] = []
    for algo in algos:
        for seed in seeds:
            for fw in frameworks:  # seed by seed, both libraries per seed
                cmd = [
                    sys.executable, __file__, "--_trial", fw, "--_algo", algo,
                    "--_seed", str(seed), "--steps", str(args.steps),
                    "--episodes", str(args.episodes), "--torch-threads", str(args.torch_threads),
                ]  # fmt: skip
                base = {"algo": algo, "framework": fw, "seed": seed}
                r = run_json_trial(cmd, base, timeout=args.timeout)
                results.append(r)
                shown = gist(r["error"]) if "error" in r else (
                    f"return {r['return']:.2f}, {r['seconds']:.1f} s, {r['env_steps']} env steps"
                )  # fmt: skip
                print(f"{algo} {fw} seed {seed}: {shown}", flush=True)

    moves = "/".join(sorted({"continuous" if a in CONTINUOUS else "discrete" for a in algos}))
    print(
        f"\nsimple_spread_v3 (N={N_AGENTS}, max_cycles={MAX_CYCLES}, {moves}, local_ratio=0.5), "
        f"{args.steps} env steps per trial, {args.seeds} seeds, final return = mean per-agent "
        f"return over {args.episodes} greedy episodes; seconds = training only\n"
    )
    print(
        "| algo | library | final return per seed | median return "
        "| seconds per seed | median seconds |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    medians: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    for algo in algos:
        for fw in frameworks:
            rows = [r for r in results if r["algo"] == algo and r["framework"] == fw]
            ret, sec = _median(rows, "return"), _median(rows, "seconds")
            medians[algo, fw] = (ret, sec)
            per_ret = " / ".join("error" if "error" in r else f"{r['return']:.2f}" for r in rows)
            per_sec = " / ".join("error" if "error" in r else f"{r['seconds']:.0f}" for r in rows)
            cells = [algo, fw, per_ret, _cell(ret, ".2f"), per_sec, _cell(sec, ".0f")]
            print("| " + " | ".join(cells) + " |")
    if "rlblocks" in frameworks and "benchmarl" in frameworks:
        print(
            "\nrlblocks against BenchMARL "
            "(targets: return at least the peer's, seconds at most half):"
        )
        for algo in algos:
            (r_ret, r_sec), (b_ret, b_sec) = medians[algo, "rlblocks"], medians[algo, "benchmarl"]
            if None in (r_ret, r_sec, b_ret, b_sec):
                print(f"  {algo}: not comparable (a contender failed every seed)")
                continue
            ratio = r_sec / b_sec
            print(
                f"  {algo}: return {r_ret:.2f} vs {b_ret:.2f} "
                f"({'met' if r_ret >= b_ret else 'missed'}); seconds ratio {ratio:.2f} "
                f"({'met' if ratio <= 0.5 else 'missed'})"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
