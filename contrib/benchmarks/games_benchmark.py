#!/usr/bin/env python
"""Two-player games: rlblocks' masked DQN against Tianshou's tic-tac-toe example, in one run.

Each contender trains DQN against a uniformly random legal opponent on PettingZoo's
``tictactoe_v3`` for the same number of the learner's own moves, then its final policy plays the
same 100 games (greedy) against a random legal player through the same code
(``rlblocks_family_pettingzoo.play_games``). The table gives win/draw/loss rates and training
seconds per seed, medians over seeds, and rlblocks' ratios to Tianshou's.

Settings, each library with its own published ones:

* **Tianshou 2.0.1**: the settings of its tic-tac-toe example (``test/pettingzoo/tic_tac_toe.py``
  in the Tianshou repository): DQN (double Q) on an MLP of 4x128, lr 1e-4, gamma 0.9, 3-step
  returns, target network copied every 320 updates, epsilon 0.1 while training, a replay buffer
  of 20,000, batch 64, 0.1 updates per collected step, 10 envs with 10 steps per collect, 50
  epochs of 1,000 env steps after a first collect of 640 steps, the learner in the second seat
  (``agent_id=2``) and the random masked opponent in the first, masked by its
  ``MultiAgentOffPolicyAlgorithm``. Two changes, so that both train for the whole budget and
  the seconds are training only: no test collector during training (the example tests 10 games
  per epoch) and no early stop (the example stops once the test return reaches 0.6).
* **rlblocks**: ``rlblocks.train("dqn", env="games/tictactoe_v3")`` with the settings of the
  tic-tac-toe CI test (``tests/plugins/families/pettingzoo/test_games_learned.py``: DQN's
  defaults plus dueling, 0.5 updates per step, 3-step returns, epsilon from 1 to 0.02 over
  20,000 steps), the learner alternating seats, no tests during training.

Equal env steps, counted alike: a step is **one move of the learner**. Tianshou's collector
counts every move of the AEC game (the random opponent's too), so this script counts the
learner's moves inside its env wrapper; rlblocks' ``games/`` env makes one env step per learner
move (the opponent moves inside it). Per seed Tianshou trains first with its example's budget,
and rlblocks then trains for the learner moves Tianshou's learner made (rounded down to a multiple
of 64), or for ``--learner-moves`` when given.

Evaluation: 100 games in the second seat (Tianshou's training seat) and 100 games alternating
seats, both against a random legal player; Tianshou's trained Q-network is wrapped as a function
of the observation (the legal action with the highest Q-value), rlblocks' run is loaded with
``rlblocks.load`` (greedy). A random legal player wins 29% of its games in the second seat
and 42% alternating (2,000 games each).

Wall seconds: training only, in a fresh subprocess per trial with torch limited to
``--torch-threads`` threads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _trials import gist, run_json_trial

FRAMEWORKS = ("tianshou", "rlblocks")
GAME = "games/tictactoe_v3"
EVAL_GAMES = 100
#: the rlblocks CI test's tic-tac-toe DQN settings
RLBLOCKS_DQN = [
    "trainer.test_interval=100000000", "algo.dueling=true", "trainer.update_per_step=0.5",
    "algo.n_step=3", "algo.eps_decay_steps=20000", "algo.eps_end=0.02",
]  # fmt: skip
#: Tianshou's tic-tac-toe example settings (test/pettingzoo/tic_tac_toe.py)
TIANSHOU_DQN: dict[str, Any] = {
    "eps_train": 0.1, "buffer_size": 20_000, "lr": 1e-4, "gamma": 0.9, "n_step": 3,
    "target_update_freq": 320, "epochs": 50, "epoch_num_steps": 1_000,
    "collection_step_num_env_steps": 10, "update_per_step": 0.1, "batch_size": 64,
    "hidden_sizes": [128, 128, 128, 128], "num_train_envs": 10, "learner_seat": 2,
}  # fmt: skip


def evaluate(player: Any, seed: int) -> dict[str, float]:
    """The same 100 games against random for every contender: second seat, then alternating."""
    from rlblocks_family_pettingzoo import play_games

    out: dict[str, float] = {}
    for label, seat in (("second", "player_2"), ("alternate", "alternate")):
        rates = play_games(player, GAME, opponent="random", n=EVAL_GAMES, seed=10_000 + seed,
                           seat=seat)  # fmt: skip
        out.update({f"{label}_{k}": v for k, v in rates.items()})
    return out


def trial_rlblocks(seed: int, learner_moves: int, epochs: int) -> dict[str, Any]:
    """Train rlblocks' masked DQN for ``learner_moves`` env steps; play the evaluation games."""
    import rlblocks

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        result = rlblocks.train(
            "dqn", env=GAME, seed=seed, max_env_steps=learner_moves, loggers=[], progress=False,
            quiet=True, run_dir=run, overrides=RLBLOCKS_DQN,
        )  # fmt: skip
        agent = rlblocks.load(run, which="latest")
        rates = evaluate(agent, seed)
    return {
        "seconds": result.wall_seconds - result.test_seconds,
        "learner_moves": result.env_steps,
        **rates,
    }


def trial_tianshou(seed: int, learner_moves: int, epochs: int) -> dict[str, Any]:
    """Train Tianshou's example DQN with its settings for ``epochs`` epochs; play the
    evaluation games. ``learner_moves`` is ignored: Tianshou's budget is counted in epochs of
    all moves, as in its example."""
    import gymnasium as gym
    import numpy as np
    import torch
    from pettingzoo.classic import tictactoe_v3
    from tianshou.algorithm import (
        DQN,
        MARLRandomDiscreteMaskedOffPolicyAlgorithm,
        MultiAgentOffPolicyAlgorithm,
    )
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.env.pettingzoo_env import PettingZooEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net

    s = TIANSHOU_DQN
    learner_name = f"player_{s['learner_seat']}"
    counted = {"learner": 0, "all": 0}

    class CountingEnv(PettingZooEnv):
        """Tianshou's PettingZoo wrapper, counting the learner's moves (DummyVectorEnv steps
        its envs in this process, so one counter sees them all)."""

        def step(self, action: Any) -> Any:
            counted["all"] += 1
            counted["learner"] += self.env.agent_selection == learner_name
            return super().step(action)

    def make_env() -> PettingZooEnv:
        return CountingEnv(tictactoe_v3.env())

    np.random.seed(seed)
    torch.manual_seed(seed)
    train_envs = DummyVectorEnv([make_env for _ in range(s["num_train_envs"])])
    train_envs.seed(seed)
    env = make_env()
    obs_space = env.observation_space
    if isinstance(obs_space, gym.spaces.Dict):
        obs_space = obs_space.spaces["observation"]
    net = Net(state_shape=obs_space.shape, action_shape=int(env.action_space.n),
              hidden_sizes=s["hidden_sizes"])  # fmt: skip
    learner = DQN(
        policy=DiscreteQLearningPolicy(model=net, action_space=env.action_space,
                                       eps_training=s["eps_train"], eps_inference=0.0),
        optim=AdamOptimizerFactory(lr=s["lr"]), n_step_return_horizon=s["n_step"],
        gamma=s["gamma"], target_update_freq=s["target_update_freq"],
    )  # fmt: skip
    opponent = MARLRandomDiscreteMaskedOffPolicyAlgorithm(action_space=env.action_space)
    seats = [opponent, learner] if s["learner_seat"] == 2 else [learner, opponent]
    algorithm = MultiAgentOffPolicyAlgorithm(algorithms=seats, env=env)

    start = time.perf_counter()
    collector = Collector[CollectStats](
        algorithm, train_envs, VectorReplayBuffer(s["buffer_size"], len(train_envs)),
        exploration_noise=True,
    )  # fmt: skip
    collector.reset()
    collector.collect(n_step=s["batch_size"] * s["num_train_envs"])
    learner_index = s["learner_seat"] - 1
    algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=collector, test_collector=None, max_epochs=epochs,
            epoch_num_steps=s["epoch_num_steps"],
            collection_step_num_env_steps=s["collection_step_num_env_steps"],
            batch_size=s["batch_size"],
            update_step_num_gradient_steps_per_sample=s["update_per_step"],
            test_in_training=False, verbose=False, show_progress=False,
            multi_agent_return_reduction=lambda rews: rews[:, learner_index],
        )
    )  # fmt: skip
    seconds = time.perf_counter() - start
    moves = dict(counted)
    net.eval()
    rates = evaluate(_greedy_q_player(net), seed)
    return {"seconds": seconds, "learner_moves": moves["learner"], "all_moves": moves["all"],
            **rates}  # fmt: skip


def _greedy_q_player(net: Any) -> Callable[[Mapping[str, Any]], int]:
    """A Q-network of Tianshou's as a function of one observation: its best legal action."""
    import numpy as np
    import torch

    def play(observation: Mapping[str, Any]) -> int:
        with torch.no_grad():
            q, _ = net(np.asarray(observation["observation"])[None])
        q = q[0].numpy().copy()
        q[np.asarray(observation["action_mask"]) == 0] = -np.inf
        return int(np.argmax(q))

    return play


TRIALS = {"rlblocks": trial_rlblocks, "tianshou": trial_tianshou}
KEYS = ("second_win", "second_draw", "second_loss", "alternate_win", "seconds")


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if "error" not in r and r.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--learner-moves", type=int, default=0,
                        help="rlblocks' budget in learner moves (0: what Tianshou's learner made "
                             "in the same seed)")  # fmt: skip
    parser.add_argument(
        "--tianshou-epochs",
        type=int,
        default=TIANSHOU_DQN["epochs"],
        help="Tianshou's budget: epochs of 1,000 moves (its example: 50)",
    )
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per trial")
    parser.add_argument("--json", type=Path, help="write every trial's result here")
    parser.add_argument("--report", type=Path, nargs="+",
                        help="print the table of trials saved by --json (one or more files) "
                             "and run nothing")  # fmt: skip
    parser.add_argument("--_trial", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._trial:  # child process: one trial, one JSON line on stdout
        import torch

        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        out = TRIALS[args._trial](args._seed, args.learner_moves, args.tianshou_epochs)
        print(json.dumps(out), flush=True)
        return

    frameworks = [f for f in args.frameworks.split(",") if f]
    if args.report:
        saved = [r for path in args.report for r in json.loads(path.read_text())]
        report(
            sorted(saved, key=lambda r: r["seed"]),
            [f for f in frameworks if any(r["framework"] == f for r in saved)],
        )
        return
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad:
        parser.error(f"--frameworks: unknown {bad}; choose from {','.join(FRAMEWORKS)}")
    if "tianshou" not in frameworks and args.learner_moves <= 0:
        parser.error("without the tianshou trials, give rlblocks' budget: --learner-moves N")
    results: list[dict[str, Any]] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        budget = args.learner_moves
        for fw in frameworks:  # seed by seed: Tianshou first, its learner's moves set the budget
            cmd = [sys.executable, __file__, "--_trial", fw, "--_seed", str(seed),
                   "--learner-moves", str(budget), "--tianshou-epochs", str(args.tianshou_epochs),
                   "--torch-threads", str(args.torch_threads)]  # fmt: skip
            r = run_json_trial(cmd, {"framework": fw, "seed": seed}, timeout=args.timeout)
            results.append(r)
            if fw == "tianshou" and "error" not in r and args.learner_moves <= 0:
                budget = r["learner_moves"] // 64 * 64  # a whole number of rlblocks' collects
            shown = gist(r["error"]) if "error" in r else (
                f"second seat win {r['second_win']:.2f} draw {r['second_draw']:.2f} "
                f"loss {r['second_loss']:.2f}; alternating win {r['alternate_win']:.2f}; "
                f"{r['seconds']:.1f} s; {r['learner_moves']} learner moves"
            )  # fmt: skip
            print(f"tictactoe {fw} seed {seed}: {shown}", flush=True)

    report(results, frameworks)
    if args.json:
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.replace(args.json)


def report(results: list[dict[str, Any]], frameworks: list[str]) -> None:
    """Print the table of ``results`` (trials of ``frameworks``) and the targets' verdicts."""
    print(f"\ntictactoe_v3 against a random legal player, {EVAL_GAMES} greedy games per seat rule; "
          "seconds = training only\n")  # fmt: skip
    print(
        "| library | learner moves per seed | 2nd seat win / draw / loss per seed "
        "| median 2nd-seat win | median alternating win | seconds per seed | median seconds |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    medians: dict[str, dict[str, float | None]] = {}
    for fw in frameworks:
        rows = [r for r in results if r["framework"] == fw]
        medians[fw] = {k: _median(rows, k) for k in KEYS}
        moves = " / ".join(str(r["learner_moves"]) if "error" not in r else "error" for r in rows)
        wdl = " / ".join(
            f"{r['second_win']:.2f}-{r['second_draw']:.2f}-{r['second_loss']:.2f}"
            if "error" not in r else "error" for r in rows
        )  # fmt: skip
        secs = " / ".join(f"{r['seconds']:.0f}" if "error" not in r else "error" for r in rows)
        m = medians[fw]
        cells = [fw, moves, wdl, _fmt(m["second_win"], ".2f"), _fmt(m["alternate_win"], ".2f"),
                 secs, _fmt(m["seconds"], ".0f")]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    if {"rlblocks", "tianshou"} <= set(frameworks):
        r, t = medians["rlblocks"], medians["tianshou"]
        if None in (r["second_win"], r["seconds"], t["second_win"], t["seconds"]):
            print("\nnot comparable: a contender failed every seed")
        else:
            ratio = r["seconds"] / t["seconds"]
            print(
                "\nrlblocks against Tianshou (targets: win rate at least the peer's, seconds at "
                f"most half): second-seat win {r['second_win']:.2f} vs {t['second_win']:.2f} "
                f"({'met' if r['second_win'] >= t['second_win'] else 'missed'}); seconds ratio "
                f"{ratio:.2f} ({'met' if ratio <= 0.5 else 'missed'})"
            )


def _fmt(x: float | None, fmt: str) -> str:
    return "error" if x is None else format(x, fmt)


if __name__ == "__main__":
    main()
