#!/usr/bin/env python
"""MuJoCo locomotion at an equal env-step budget: rlblocks and Tianshou, SAC, TD3, DDPG and PPO.

``--algos crossq,tqc,sac-simba`` adds the newer learners' rows, on the same budget, seeds, test
schedule and one torch thread: rlblocks' CrossQ and TQC with their MuJoCo presets (from their
papers) against sb3-contrib 2.9.2's CrossQ and TQC (framework ``sb3``) with RL Baselines3 Zoo's
MuJoCo hyperparameters (``SB3_ZOO`` below: the zoo's ``hyperparams/crossq.yml`` and ``tqc.yml``,
their ``*-v4`` entries applied to v5; the zoo is not installed in the benchmark environment, so
they are written out by hand, with sb3-contrib's defaults for every key the zoo leaves out), and
``sac-simba``: rlblocks' SAC with its MuJoCo preset and ``algo.network=simba`` (the SAC plugin
has no SimBa preset, so only the network changes: running-statistics input normalisation and
SimBa's sizes, an actor of 1 residual block of width 128 and critics of 2 blocks of 512, as in
the SimBa paper's SAC; its learning rates, temperature and warm-up stay the SAC preset's). Each
row runs rlblocks and its one peer (``PEER``): Tianshou has neither CrossQ nor TQC, and
sac-simba has no peer: its target is the landed rlblocks SAC row. sb3-contrib is tested by a
callback of ours (``trial_sb3``): 10 episodes every ``--test-interval`` env steps on 10 test
envs with deterministic actions, as the other libraries test; its warm-up (``learning_starts``)
counts in the budget. The report sets these rows against their peers in a table of their own
and computes the targets of this table's issue per env (CrossQ or SAC+SimBa at 1.5x the landed
SAC row's final return; each new row at least its peer's final return with at most half its
wall time). These networks are sized for a GPU: on one CPU thread a seed of the five new trials
costs about 17 CPU-hours per env (``NEW_ROWS_COST``, measured 2026-12-07), so their cells fill
a seed at a time across sessions, in the script's order.

For each (env, algorithm, seed) both libraries train from scratch for the same number of env
steps (random warm-up included) and test every ``--test-interval`` env steps on 10 episodes.
The script writes, under ``--out-dir``:

* ``results.jsonl``: one JSON line per finished trial (learning curve, final and best test
  return, wall seconds). A re-run skips the trials already there, so a long benchmark can be
  run in pieces (and extended with more seeds later); ``--report-only`` only redraws.
* ``README.md``: the table (final and best return, mean ± std over seeds; median wall seconds;
  rlblocks' wall / Tianshou's wall) next to the Tianshou paper's published 1M-step numbers,
  and the same trials seed by seed (a seed's two trials share torch's seed, which for DDPG
  and TD3 gives both the same initial actor; critic weights, warm-up actions, noise and
  replay rows come from each library's own random streams): rlblocks minus Tianshou for the
  final return and for the mean of the last three tests, with its standard error and the
  seeds rlblocks ended ahead on.
* ``<env>.png``: learning curves, one panel per algorithm, both libraries on one plot (mean
  over seeds, shaded ± std).

Every trial runs in a fresh subprocess of this interpreter with ``torch.set_num_threads
(--torch-threads)`` (default 1), so no library inherits another's threads, RNG or caches.
Trials are interleaved (for each seed, each env, each algorithm, both libraries) so that
machine noise and an interrupted run fall on both alike. Seeds start at 100, away from the
seeds defaults were tuned on. A cell whose trials ran on different days, or on a loaded
machine, was re-run whole on one day with its earlier trials kept beside the results
(``hopper-ddpg-mixed-days.jsonl``: Hopper-v5 DDPG, re-run on 2026-11-27; its seed 101 had run
at about twice the wall of the others for both libraries). A cell whose rlblocks code changed
is re-run whole, both libraries, with its earlier trials kept beside
(``hopper-td3-before-actor-step.jsonl``: Hopper-v5 TD3, re-run on 2026-11-28 after TD3's actor
step stopped computing the critics' gradients, a change that leaves every parameter
bit-identical: seeds 100, 101, 103 and 104 repeated their learning curves exactly, for both
libraries; seed 102, first run on 2026-11-26, differed already at the first test, in the
seventh significant digit, and then diverged for both libraries alike (rlblocks 205 then, 245
now; Tianshou 207, 218), so the cause lies outside either library's code. Traced the same day:
run again, today's code gives today's first test to the last digit (117.23117130295338; the
first run read 117.23117190232013), also with numpy's and torch's CPU kernels held to AVX2
(``NPY_DISABLE_CPU_FEATURES``, ``ATEN_CPU_CAPABILITY``); the benchmark environment was rebuilt
from the same pinned versions on 2026-11-27, between the two runs, so what made the first run
differ (the virtual machine's host processor, or a build of a shared dependency) is gone and
its seed-102 curve cannot be repeated here). A cell whose rlblocks preset changed is re-run
whole too: HalfCheetah-v5 PPO, on 2026-11-28, after PPO's HalfCheetah preset began starting the
policy's log-std at -1 instead of 0 (chosen on seeds 0-9, see the PPO plugin's ``presets.py``);
the ten log-std-0 seeds of both libraries are kept in ``halfcheetah-ppo-log-std-0.jsonl``
(rlblocks 72 ± 203 against Tianshou's 115 ± 79), the tuning trials in
``ppo-log-std-tuning.jsonl``. Between
2026-11-27 and 2026-11-28 every cell was extended from 3 to 5 seeds (103 and 104, both
libraries, all cells alike, decided before those seeds ran and whatever they show), a seed at a
time across sessions, so the seeds of one cell can come from different days, each seed's two
trials still back to back.

Contenders (each with its own settings, nothing tuned on the reported seeds):

* rlblocks: ``rlblocks.train(algo, env=ENV, seed=s, loggers=[], progress=False)`` with the
  algorithm's MuJoCo preset (the TD3 and PPO papers' settings; SAC and DDPG as Tianshou's
  examples; PPO's HalfCheetah preset also starts the policy's log-std at -1, a value tuned on
  seeds 0-9 at this budget and checked at 500k steps; until 2026-11-27 SAC used the SAC paper's
  Adam 3e-4 and automatic entropy tuning, trials kept in ``sac-paper-settings.jsonl`` next to
  the results), overriding only the budget
  (``trainer.max_env_steps``), the test interval, and for PPO the learning-rate decay horizon
  (``algo.lr_decay_steps`` = the budget). ``--rlblocks-set KEY=VALUE`` (repeatable) adds
  overrides for trying a setting, on the tuning seeds (``--first-seed 0``) and in another
  ``--out-dir``; the trials record them under ``rlblocks_set``. The table's runs use none.
* Tianshou 2.0.1 with the defaults of its ``examples/mujoco/mujoco_{sac,td3,ddpg,ppo}.py`` (at
  commit f2402056 of thu-ml/tianshou; copied into ``TIANSHOU_EXAMPLES`` below) and its envs
  built as those examples build them (``EnvFactoryRegistered`` with shared-memory subprocess
  workers; observation normalisation for PPO). The examples' epoch length becomes the test
  interval and their epoch count is set so that warm-up plus training equals the budget; PPO's
  learning rate decays linearly to zero over the budget, as the example's does over its own.
  Tianshou 2.0.1's trainer scans its whole replay buffer for NaNs after every collect
  (``buffer.hasnull()``, a known regression: thu-ml/tianshou#1265), every env step for the
  off-policy examples; the table times Tianshou as released, with it, and ``--tianshou-nan-check
  off`` times it without (its share of Tianshou's wall time is not measured yet).

The Tianshou paper's numbers (Weng et al., 2022, JMLR, table 2: max average return over 10
seeds at 1M steps, v3 envs; PPO at 3M) are printed for orientation only: the budget here is
far smaller.

Named ``mujoco_benchmark.py``, not ``mujoco.py``: a script's folder comes first on
``sys.path``, so a ``mujoco.py`` there would shadow the ``mujoco`` package for every script
in it (this one included).

On 2026-11-28 the six off-policy cells (SAC, TD3, DDPG on both envs) began the same extension
to seeds 105-109, all cells alike and both libraries, decided before any of those trials ran and
to be reported whatever they show (a planners' question: the Hopper TD3 and DDPG cells trailed
Tianshou by the mean at 5 seeds, not significantly); about 1.5 hours of this machine per seed,
so it goes a seed at a time, in the script's order, across sessions. The first run of rlblocks'
Hopper SAC seed 105 overlapped with test runs on the machine's other core (604 s; 509 s when
run again on a quiet machine, the same day, right after Tianshou's trial of that seed); it is
kept in ``loaded-trials.jsonl`` and not in the table. Its learning curve equals the re-run's to
the last digit: a trial's returns do not depend on the machine's load, only its wall time does.
The first pair of HalfCheetah DDPG seed 105 (rlblocks 223 s, Tianshou 863 s) overlapped short
diagnostic runs on the other core, mostly during Tianshou's trial, which can flatter the wall
ratio; both trials were run again back to back on a quiet machine the same day, and the first
pair is kept in ``loaded-trials.jsonl``. The extension ended on 2026-11-29 with seed 109 of
Hopper SAC and the three HalfCheetah cells; two of those rlblocks trials (HalfCheetah SAC and
TD3) shared the machine with a single-threaded, niced diagnostic run on the other core, started
after the rlblocks trial and ended before the Tianshou trial of the pair began, which can only
slow rlblocks' side; the table keeps them.

Run (in .venv-bench, see README.md): ``python contrib/benchmarks/mujoco_benchmark.py
--envs Hopper-v5,HalfCheetah-v5 --algos sac,td3,ddpg,ppo --steps 50000 --seeds 5
--out-dir docs/benchmarks/mujoco``, then the same with ``--algos ppo --seeds 10``: the PPO cells
were extended to seeds 105-109 on 2026-11-28 (both envs, both libraries, decided before they ran),
because a PPO trial costs 20-100 s and 50k-step PPO returns on HalfCheetah spread from about
-100 to 650 over seeds (a seed's policy starts running by then or does not), which 5 seeds cannot
average out; at 5 seeds HalfCheetah PPO read -30 ± 82 (rlblocks) against 97 ± 60 (Tianshou).
The off-policy extension (above) is the same command with ``--algos sac,td3,ddpg --seeds 10``;
a re-run skips the trials already in ``results.jsonl``.

On 2026-11-29 (commit 351393c) the critics' scalar output layer got its own CPU kernel
(``rlblocks.algo.nets.EnsembleLinear``: a multiply and a row sum instead of ``baddbmm``'s
matrix-vector path; the same arithmetic, rounded differently, with 1.3-1.5x Tianshou's CPU
gradient steps per second against 1.2-1.5x before, ``docs/benchmarks/update_rate_cpu.md``).
Every off-policy trial in the table ran the code before it (5494d6d or earlier), and today's
code does not repeat their curves digit for digit: a change in rounding sends a trial down
another path from the first updates on, as a change of seed would. Re-running the six off-policy
cells whole, both libraries, at 10 seeds takes about 20 hours of this machine; until that is
done the off-policy rows describe the earlier code, and from then on each rlblocks trial records
the commit it ran (``rlblocks_code``; the report counts them under the table). A returns-only
check of the new code on fresh seeds (200-209, wall not measured: both cores were in use) is
kept beside the results: ``hopper-seeds-200-209.jsonl`` (``walls_comparable`` false). As it
stood on 2026-11-29: Hopper TD3 rlblocks 249 ± 59, Tianshou 270 ± 106, both over seeds 200-209
(Welch t -0.54; rlblocks ahead on 5 of the 10 seeds: a seed's two trials start from the same
actor weights, so their first tests agree, and draw the rest from their own random streams);
Hopper DDPG rlblocks 238 ± 90 over 200-209,
Tianshou 317 ± 62 over
200-209 (Welch t -2.26 at 15.9 degrees of freedom, a difference at the 5% level; rlblocks
ahead on 3 of 10). Eight more Hopper DDPG pairs (seeds 300-307, decided before they ran,
rlblocks at 6eb8a64, ``hopper-ddpg-seeds-300-307.jsonl``): rlblocks 248 ± 128, Tianshou
358 ± 286, paired final difference -110 ± 99 (rlblocks ahead on 3 of 8). Pooled over the 28
pairs of seeds 100-109, 200-209 and 300-307: final -83 ± 33 (ahead on 9), mean of the last three
tests -38 ± 16, mean of every test after the warm-up -20 ± 13, best -26 ± 42. What the two
libraries compute is not where it comes from: ``pipeline_lockstep.py`` trains both with every
random draw of training made equal (warm-up actions, exploration noise, replay rows, initial
weights), and the two stay together to float rounding for about 150 training steps, then part
as rlblocks parts from itself when its critic's start is changed in the last bit (acting means
apart by 1e-4 at step 315 against the control's 155, by 0.1 at 546 against 548); TD3 likewise
(``--algo td3``, the target clip and the delayed actor's phase set alike: Tianshou and the
control part from rlblocks at the same steps, by 0.1 at 1552). Their random streams are the
same distributions from different generators, so what is left is which draws a seed gets:
chance, or a gap too small for these seeds to show.

From commit 4f4564c on, the trainer tests a warm-up that reaches a test step right after it,
before the first gradient step, so rlblocks' curves start at the warm-up's last step (25,000 or
10,000 here) with the untrained policy, as Tianshou's do; earlier trials' first point is at
warm-up + 1, after one gradient step. The training draws are the same either way.

Tuning runs, kept beside the results and not in the table: ``td3-target-clip-tuning.jsonl``
(2026-11-29, rlblocks only, tuning seeds 0-19 on Hopper-v5 and 0-1 on HalfCheetah-v5, budget
50,000). rlblocks' buffer keeps the policy's noisy actions unclipped, as Tianshou's does, while
rlblocks' TD3 clips the smoothed target action to the bounds, as the TD3 paper's code does (that
code clips the stored actions too); TD3's ``target_action_clip`` and ``clip_exploration``
choose either way. Trials record their settings under ``rlblocks_set``. Hopper final return,
mean over seeds 0-9 (a seed starts from the same weights and warm-up data under every setting,
so seeds pair): as shipped 259; target action unclipped 287 (paired difference +28 ± 19
standard error, ahead on 6 of 10; best return 318 against 280); exploring actions clipped
before storing, as the paper's code does, 233 (-26 ± 22, ahead on 3; the mean of the last three
tests -28 ± 11). HalfCheetah seeds 0 and 1: as shipped 1946 and 2241, unclipped target 2445 and
893. Neither difference decides a default at this many seeds. A second tuning set decided the
target clip by a rule written down before it ran (change the default only if the 20 pairs of
seeds 0-19 give a positive paired mean at t >= 2 and seeds 10-19 alone lean the same way):
seeds 10-19 (rlblocks at 6eb8a64) give as shipped 252, unclipped 244 (paired -8 ± 25, ahead on
5 of 10; last three tests -8 ± 13); pooled over seeds 0-19, +10 ± 16 (t 0.62, ahead on 11 of
20). So the paper's target clip stays and the buffer keeps unclipped actions; several trials
shared the machine's two cores, so their wall times are not comparable (``walls_comparable``
false).

The re-run of the off-policy cells on the current code began on 2026-12-01 with Hopper-v5 SAC
(rlblocks at cca0b9d, which uses a fixed temperature exactly as configured; Tianshou as in the
table), seeds 100-109, both libraries back to back on a quiet machine, the same command as the
table's with ``--algos sac --envs Hopper-v5``, run on 2026-12-01 and 2026-12-02 across three
sessions. It replaced the cell on 2026-12-02; the cell's earlier trials (rlblocks at 5494d6d or
earlier, run 2026-11-27 to 2026-11-29) are kept in ``hopper-sac-before-rerun.jsonl``, and a
first pair of 2026-11-29 at 6eb8a64 (rlblocks 449 s against Tianshou's 892 s) was lost with that
machine. Seed 102's first pair shared the second vCPU with test runs (rlblocks' trial took
562 s); it is kept in ``loaded-trials.jsonl`` (marked ``load_note``) and the pair was run
again on a quiet machine the same day as seeds 106-109: rlblocks 466 s, Tianshou 1207 s
(pair ratio 0.39), and both learning curves equal the loaded run's to the last digit. Over the
ten pairs the pair ratio is 0.36 (largest 0.39), against the earlier cell's 0.51 (0.55); the
medians are rlblocks 462 s and Tianshou 1262 s, against the earlier cell's 522 s and 1041 s.
Tianshou's trials ran 1.1-1.5x slower on the re-run's days than on the earlier cell's, rlblocks'
at or below them (not traced; Tianshou's envs run in 11 subprocesses, rlblocks' in its own process),
so part of the lower ratio is the day's and not the code's; each seed's two trials still ran
back to back. Final return: rlblocks 708 ± 315 against 485 ± 154 (Welch t +2.01;
seed by seed +223 ± 111, ahead on 7 of 10; the mean of the last three tests +111 ± 136), where
the earlier cell read 1015 ± 939 against 547 ± 182.

Hopper-v5 DDPG was re-run the same way (pre-registered in 7478a1d's message: the ten pairs replace
the cell whatever they show), seeds 100-109, ``--algos ddpg --envs Hopper-v5``, on 2026-12-02/03
across two sessions; rlblocks' trials ran dddb652 to f8b69b4 (``rlblocks_code``; "a734846+modified"
is a tree whose only changes were benchmark data files); the commits among them changed the
collector's trajectory-view code, which DDPG (acting without views) does not use, and seed 100's
curves are the same at cb640ed and a734846. It replaced the cell on 2026-12-03; the earlier trials
(rlblocks at 5494d6d or earlier) are kept in ``hopper-ddpg-before-rerun.jsonl``. Seed 100's first
pair overlapped a few minutes of niced unit tests and is kept in ``loaded-trials.jsonl``; its
repeat on a quiet machine gave the same final returns (rlblocks 341, Tianshou 306). Over the ten
pairs: pair ratio 0.39 (largest 0.40), medians rlblocks 120 s and Tianshou 304 s, against the
earlier cell's 0.42 (0.51), 204 s and 452 s. Final return: rlblocks 337 ± 61 against 307 ± 43
(Welch t +1.28; seed by seed +30 ± 23, ahead on 6 of 10; the mean of the last three tests -34 ± 34,
ahead on 4 of 10), where the earlier cell read 221 ± 64 against 286 ± 86. The two libraries are not
told apart by these seeds on either measure.

Hopper-v5 TD3 was re-run the same way (pre-registered in 4df653a's message), seeds 100-109,
``--algos td3 --envs Hopper-v5``, on 2026-12-03 across two sessions, on a quiet machine; rlblocks'
trials ran 4df653a (seeds 100-103) and be0c9b9 (seeds 104-109; the later hashes recorded in
``rlblocks_code`` are commits of benchmark data only). The one code change between them
(be0c9b9) touches only a collector path that runs when an env worker is restarted, and seed
100's rlblocks curve at be0c9b9 equals the one at 4df653a. It replaced the cell on 2026-12-03;
the earlier trials (rlblocks at 5494d6d or earlier) are kept in ``hopper-td3-before-rerun.jsonl``.
Over the ten pairs: pair ratio 0.35 (largest 0.39), medians rlblocks 145 s and Tianshou 396 s,
against the earlier cell's 0.46 (0.49), 250 s and 531 s. Final return: rlblocks 254 ± 60 against
285 ± 132 (Welch t -0.68; seed by seed -31 ± 47, ahead on 6 of 10; the mean of the last three
tests -18 ± 25, ahead on 5 of 10; medians 223 against 244), where the earlier cell read 239 ± 38
against 277 ± 53. Tianshou's seed 105 ended at 650, above its next best run (319) by 331; without
that pair the means would read 258 against 245. The two libraries are not told apart by these
seeds.

Test protocol (found 2026-12-02): rlblocks' PPO tests the mean action (its
``deterministic_eval`` default) while Tianshou's PPO example samples test actions, so the table's
PPO rows compare two protocols. rlblocks' PPO trials were re-run with sampled test actions, same
seeds and budget, rlblocks only: ``--algos ppo --frameworks rlblocks --seeds 10 --rlblocks-set
algo.deterministic_eval=false --out-dir DIR``, then DIR/results.jsonl copied to
``ppo-sampled-test-actions.jsonl`` here; the report sets them against the table's Tianshou
trials under the paired table. The off-policy rows share one protocol already (SAC: the mean
action in both, both libraries' defaults; DDPG and TD3 act deterministically).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from _trials import run_json_trial

ALGOS = ("sac", "td3", "ddpg", "ppo", "crossq", "tqc", "sac-simba")
#: What a run without ``--algos`` trains (the landed table's rows).
DEFAULT_ALGOS = ("sac", "td3", "ddpg", "ppo")
FRAMEWORKS = ("rlblocks", "tianshou", "sb3")
LABELS = {"rlblocks": "rlblocks", "tianshou": "Tianshou", "sb3": "sb3-contrib"}
#: The framework each algorithm's rlblocks row is set against: Tianshou 2.0.1 for the landed
#: rows, sb3-contrib for CrossQ and TQC (Tianshou has neither), none for SAC with the SimBa
#: network (its target is the landed rlblocks SAC row, not a peer).
PEER: dict[str, str | None] = {
    "sac": "tianshou",
    "td3": "tianshou",
    "ddpg": "tianshou",
    "ppo": "tianshou",
    "crossq": "sb3",
    "tqc": "sb3",
    "sac-simba": None,
}
#: Rows that are an rlblocks algorithm with overrides on top of its MuJoCo preset: the plugin
#: trained and the ``--set`` items added (before ``--rlblocks-set``, which wins).
RLBLOCKS_VARIANTS: dict[str, tuple[str, list[str]]] = {
    "sac-simba": ("sac", ["algo.network=simba"]),
}
TEST_EPISODES = 10

#: Tianshou's examples/mujoco defaults (mujoco_<algo>.py, ``main``'s keyword defaults).
TIANSHOU_EXAMPLES: dict[str, dict[str, Any]] = {
    "sac": {
        "hidden_sizes": [256, 256],
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "gamma": 0.99,
        "tau": 0.005,
        "alpha": 0.2,
        "auto_alpha": False,
        "alpha_lr": 3e-4,
        "start_timesteps": 10_000,
        "epoch_num_steps": 5_000,
        "step_per_collect": 1,
        "update_per_step": 1,
        "n_step": 1,
        "batch_size": 256,
        "buffer_size": 1_000_000,
        "training_envs": 1,
    },
    "td3": {
        "hidden_sizes": [256, 256],
        "actor_lr": 3e-4,
        "critic_lr": 3e-4,
        "gamma": 0.99,
        "tau": 0.005,
        "exploration_noise": 0.1,
        "policy_noise": 0.2,
        "noise_clip": 0.5,
        "update_actor_freq": 2,
        "start_timesteps": 25_000,
        "epoch_num_steps": 5_000,
        "step_per_collect": 1,
        "update_per_step": 1,
        "n_step": 1,
        "batch_size": 256,
        "buffer_size": 1_000_000,
        "training_envs": 1,
    },
    "ddpg": {
        "hidden_sizes": [256, 256],
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "gamma": 0.99,
        "tau": 0.005,
        "exploration_noise": 0.1,
        "start_timesteps": 25_000,
        "epoch_num_steps": 5_000,
        "step_per_collect": 1,
        "update_per_step": 1,
        "n_step": 1,
        "batch_size": 256,
        "buffer_size": 1_000_000,
        "training_envs": 1,
    },
    "ppo": {
        "hidden_sizes": [64, 64],
        "lr": 3e-4,
        "gamma": 0.99,
        "buffer_size": 4096,
        "step_per_collect": 2048,
        "repeat": 10,
        "batch_size": 64,
        "training_envs": 8,
        "return_scaling": True,
        "vf_coef": 0.25,
        "ent_coef": 0.0,
        "gae_lambda": 0.95,
        "bound_action_method": "clip",
        "max_grad_norm": 0.5,
        "eps_clip": 0.2,
        "value_clip": True,
        "advantage_normalization": False,
        "recompute_adv": True,
        # the example's epoch is 30,000 steps; three collects here, so tests come as often as
        # the off-policy ones and both libraries test on the same grid
        "epoch_num_steps": 3 * 2048,
    },
}

#: Weng et al. (2022), "Tianshou: A Highly Modularized Deep Reinforcement Learning Library",
#: JMLR 23(267), table 2 (v3 tasks; SAC/TD3/DDPG at 1M steps, PPO at 3M).
TIANSHOU_PAPER: dict[str, dict[str, str]] = {
    "sac": {
        "Ant": "5850 ± 476",
        "HalfCheetah": "12139 ± 1049",
        "Hopper": "3542 ± 52",
        "Walker2d": "5007 ± 252",
    },
    "td3": {
        "Ant": "5116 ± 800",
        "HalfCheetah": "10201 ± 773",
        "Hopper": "3472 ± 117",
        "Walker2d": "3982 ± 275",
    },
    "ddpg": {
        "Ant": "990 ± 4",
        "HalfCheetah": "11719 ± 466",
        "Hopper": "2197 ± 972",
        "Walker2d": "1401 ± 905",
    },
    "ppo": {
        "Ant": "4079 ± 880",
        "HalfCheetah": "7337 ± 1508",
        "Hopper": "3128 ± 413",
        "Walker2d": "4896 ± 704",
    },
}


def budget_for(algo: str, steps: int) -> int:
    """PPO's budget rounds up to whole test intervals of whole collects, so that both
    libraries stop at the same env step; the off-policy budgets are multiples of 5,000 already."""
    if algo == "ppo":
        every = TIANSHOU_EXAMPLES["ppo"]["epoch_num_steps"]
        return math.ceil(steps / every) * every
    return steps


def interval_for(algo: str, test_interval: int) -> int:
    return TIANSHOU_EXAMPLES["ppo"]["epoch_num_steps"] if algo == "ppo" else test_interval


# --------------------------------------------------------------------------------------------
# Trials (each in its own subprocess)
# --------------------------------------------------------------------------------------------


def code_version(module_file: str) -> str:
    """The git commit the imported rlblocks comes from (``+modified`` when its tracked files
    differ from that commit), else the installed version: a trial records the code it ran, so
    a table can tell trials of different code apart."""
    where = os.path.dirname(os.path.abspath(module_file))

    def git(*cmd: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", "-C", where, *cmd], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "--short=7", "HEAD")
    if commit:
        modified = git("status", "--porcelain", "--untracked-files=no")
        return commit + ("+modified" if modified else "")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "rlblocks " + version("rlblocks")
    except PackageNotFoundError:
        return "unknown"


def trial_rlblocks(
    algo: str, env: str, seed: int, steps: int, interval: int, extra: list[str] | None = None
) -> dict[str, Any]:
    import rlblocks
    from rlblocks.plugins import hookimpl

    curve: list[tuple[int, float]] = []
    network: list[str] = []

    class Curve:
        @hookimpl
        def rlblocks_run_start(self, config: dict[str, Any]) -> None:
            # the network the run resolved (sac-simba's row records "simba")
            network.append(str(config.get("algo", {}).get("network", "mlp")))

        @hookimpl
        def rlblocks_test_end(self, stats: dict[str, Any], env_step: int) -> None:
            if not stats.get("screened"):  # full tests only (a screen plays a few episodes)
                curve.append((int(env_step), float(stats["return_mean"])))

    overrides = [
        f"trainer.max_env_steps={steps}",
        f"trainer.test_interval={interval}",
        f"trainer.test_episodes={TEST_EPISODES}",
    ]
    if algo == "ppo":
        overrides.append(f"algo.lr_decay_steps={steps}")
    plugin, variant = RLBLOCKS_VARIANTS.get(algo, (algo, []))
    overrides += variant  # a row's own settings (sac-simba: the SimBa network)
    overrides += extra or []  # --rlblocks-set, after the budget so that they win
    with tempfile.TemporaryDirectory(prefix="rlblocks-bench-") as tmp:
        result = rlblocks.train(
            plugin,
            env=env,
            seed=seed,
            loggers=[],
            progress=False,
            run_dir=f"{tmp}/run",
            overrides=overrides,
            hooks=[Curve()],
            stop_reward=1e12,  # never reached: the whole budget runs
        )
    out = {"curve": curve, "seconds": float(result.wall_seconds), "env_steps": result.env_steps}
    out["rlblocks_code"] = code_version(rlblocks.__file__)
    out["rlblocks_network"] = network[0] if network else "unknown"
    if variant:
        out["rlblocks_variant"] = [plugin, *variant]
    if extra:
        out["rlblocks_set"] = list(extra)
    return out


def trial_tianshou(
    algo: str, env_id: str, seed: int, steps: int, interval: int, nan_check: str = "on"
) -> dict[str, Any]:
    import numpy as np
    import torch
    from tianshou.data import Collector, CollectStats, ReplayBuffer, VectorReplayBuffer
    from tianshou.env import VectorEnvNormObs
    from tianshou.highlevel.env import EnvFactoryRegistered, EnvMode, VectorEnvType
    from tianshou.trainer import OffPolicyTrainerParams, OnPolicyTrainerParams

    a = TIANSHOU_EXAMPLES[algo]
    curve: list[tuple[int, float]] = []
    warmup = int(a.get("start_timesteps", 0))
    t0 = time.perf_counter()

    class RecordingCollector(Collector):
        """The test collector, recording each test's mean return at the env step it ran."""

        def collect(self, *args: Any, **kwargs: Any) -> Any:
            stats = super().collect(*args, **kwargs)
            if stats.returns_stat is not None:
                # run_training resets the collector's step count after the warm-up collect
                done = warmup + int(train_collector.collect_step)
                curve.append((done, float(stats.returns_stat.mean)))
            return stats

    factory = EnvFactoryRegistered(
        task=env_id, venv_type=VectorEnvType.SUBPROC_SHARED_MEM_AUTO, envpool_factory=None
    )
    rng = np.random.default_rng(seed)
    env = factory.create_env(EnvMode.TRAINING)
    train_envs = factory.create_venv(
        a["training_envs"], EnvMode.TRAINING, seed=int(rng.integers(1 << 31))
    )
    test_envs = factory.create_venv(TEST_EPISODES, EnvMode.TEST, seed=int(rng.integers(1 << 31)))
    if algo == "ppo":  # the example's obs_norm=True
        train_envs = VectorEnvNormObs(train_envs, update_obs_rms=True)
        test_envs = VectorEnvNormObs(test_envs, update_obs_rms=False)
        test_envs.set_obs_rms(train_envs.get_obs_rms())
    np.random.seed(seed)
    torch.manual_seed(seed)
    obs_shape = env.observation_space.shape
    act_shape = env.action_space.shape
    algorithm = _tianshou_algorithm(algo, a, env, obs_shape, act_shape, steps)
    if algo == "ppo" or a["training_envs"] > 1:
        buf: Any = VectorReplayBuffer(a["buffer_size"], len(train_envs))
    else:
        buf = ReplayBuffer(a["buffer_size"])
    if nan_check == "off":  # the trainer's whole-buffer NaN scan after every collect
        buf.hasnull = lambda: False  # type: ignore[method-assign]
    train_collector = Collector[CollectStats](algorithm, train_envs, buf, exploration_noise=True)
    test_collector = RecordingCollector(algorithm, test_envs)
    train_collector.reset()
    if warmup:  # the example's random warm-up, before run_training (its env steps count here)
        train_collector.collect(n_step=warmup, random=True)
    epochs = (steps - warmup) // a["epoch_num_steps"]
    common = {
        "training_collector": train_collector,
        "test_collector": test_collector,
        "max_epochs": epochs,
        "epoch_num_steps": a["epoch_num_steps"],
        "collection_step_num_env_steps": a["step_per_collect"],
        "test_step_num_episodes": TEST_EPISODES,
        "batch_size": a["batch_size"],
        "test_in_training": False,
        "logger": None,
        "verbose": False,
        "show_progress": False,
    }
    if algo == "ppo":
        params: Any = OnPolicyTrainerParams(**common, update_step_num_repetitions=a["repeat"])
    else:
        params = OffPolicyTrainerParams(
            **common, update_step_num_gradient_steps_per_sample=a["update_per_step"]
        )
    algorithm.run_training(params)
    seconds = time.perf_counter() - t0
    train_envs.close()
    test_envs.close()
    return {
        "curve": curve,
        "seconds": seconds,
        "env_steps": warmup + int(train_collector.collect_step),
        "nan_check": nan_check,
    }


def _tianshou_algorithm(
    algo: str, a: dict[str, Any], env: Any, obs_shape: Any, act_shape: Any, steps: int
) -> Any:
    """The example's networks, optimisers and algorithm object."""
    import numpy as np
    import torch
    from tianshou.algorithm import DDPG, PPO, SAC, TD3
    from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory, LRSchedulerFactoryLinear
    from tianshou.exploration import GaussianNoise
    from tianshou.utils.net.common import ActorCritic, Net
    from tianshou.utils.net.continuous import (
        ContinuousActorDeterministic,
        ContinuousActorProbabilistic,
        ContinuousCritic,
    )
    from torch.distributions import Distribution, Independent, Normal

    hidden = a["hidden_sizes"]
    max_action = float(env.action_space.high[0])

    def q_critic() -> ContinuousCritic:
        return ContinuousCritic(
            preprocess_net=Net(
                state_shape=obs_shape, action_shape=act_shape, hidden_sizes=hidden, concat=True
            )
        )

    if algo == "sac":
        actor = ContinuousActorProbabilistic(
            preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
            action_shape=act_shape,
            unbounded=True,
            conditioned_sigma=True,
        )
        alpha: Any = a["alpha"]
        if a["auto_alpha"]:
            alpha = AutoAlpha(
                -float(np.prod(act_shape)), 0.0, AdamOptimizerFactory(lr=a["alpha_lr"])
            )
        return SAC(
            policy=SACPolicy(actor=actor, action_space=env.action_space),
            policy_optim=AdamOptimizerFactory(lr=a["actor_lr"]),
            critic=q_critic(),
            critic_optim=AdamOptimizerFactory(lr=a["critic_lr"]),
            critic2=q_critic(),
            critic2_optim=AdamOptimizerFactory(lr=a["critic_lr"]),
            tau=a["tau"],
            gamma=a["gamma"],
            alpha=alpha,
            n_step_return_horizon=a["n_step"],
        )
    if algo in ("td3", "ddpg"):
        policy = ContinuousDeterministicPolicy(
            actor=ContinuousActorDeterministic(
                preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden),
                action_shape=act_shape,
                max_action=max_action,
            ),
            action_space=env.action_space,
            exploration_noise=GaussianNoise(sigma=a["exploration_noise"] * max_action),
        )
        common = {
            "policy": policy,
            "policy_optim": AdamOptimizerFactory(lr=a["actor_lr"]),
            "critic": q_critic(),
            "critic_optim": AdamOptimizerFactory(lr=a["critic_lr"]),
            "tau": a["tau"],
            "gamma": a["gamma"],
            "n_step_return_horizon": a["n_step"],
        }
        if algo == "ddpg":
            return DDPG(**common)
        return TD3(
            **common,
            critic2=q_critic(),
            critic2_optim=AdamOptimizerFactory(lr=a["critic_lr"]),
            policy_noise=a["policy_noise"] * max_action,
            update_actor_freq=a["update_actor_freq"],
            noise_clip=a["noise_clip"],
        )
    # PPO, as examples/mujoco/mujoco_ppo.py builds it
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden, activation=torch.nn.Tanh),
        action_shape=act_shape,
        unbounded=True,
    )
    critic = ContinuousCritic(
        preprocess_net=Net(state_shape=obs_shape, hidden_sizes=hidden, activation=torch.nn.Tanh)
    )
    actor_critic = ActorCritic(actor, critic)
    torch.nn.init.constant_(actor.sigma_param, -0.5)
    for m in actor_critic.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.orthogonal_(m.weight, gain=np.sqrt(2))
            torch.nn.init.zeros_(m.bias)
    for m in actor.mu.modules():
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.zeros_(m.bias)
            m.weight.data.copy_(0.01 * m.weight.data)
    optim = AdamOptimizerFactory(lr=a["lr"])
    optim.with_lr_scheduler_factory(
        LRSchedulerFactoryLinear(
            max_epochs=steps // a["epoch_num_steps"],
            epoch_num_steps=a["epoch_num_steps"],
            collection_step_num_env_steps=a["step_per_collect"],
        )
    )

    def dist(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> Distribution:
        loc, scale = loc_scale
        return Independent(Normal(loc, scale), 1)

    policy = ProbabilisticActorPolicy(
        actor=actor,
        dist_fn=dist,
        action_scaling=True,
        action_bound_method=a["bound_action_method"],
        action_space=env.action_space,
    )
    return PPO(
        policy=policy,
        critic=critic,
        optim=optim,
        gamma=a["gamma"],
        gae_lambda=a["gae_lambda"],
        max_grad_norm=a["max_grad_norm"],
        vf_coef=a["vf_coef"],
        ent_coef=a["ent_coef"],
        return_scaling=a["return_scaling"],
        eps_clip=a["eps_clip"],
        value_clip=a["value_clip"],
        dual_clip=None,
        advantage_normalization=a["advantage_normalization"],
        recompute_advantage=a["recompute_adv"],
    )


#: RL Baselines3 Zoo's MuJoCo hyperparameters for sb3-contrib (DLR-RM/rl-baselines3-zoo,
#: ``hyperparams/crossq.yml`` and ``hyperparams/tqc.yml``, their ``*-v4`` MuJoCo entries, zoo
#: 2.x as of sb3-contrib 2.9; the zoo is not installed here, so they are written out by hand
#: and applied to the v5 envs). crossq.yml's were read from the zoo's repository (commit
#: 208b6fd); tqc.yml's MuJoCo block (``learning_starts`` 10,000 on every task, Hopper dropping
#: 5 atoms per critic) is written from the published file as remembered: the copies at hand
#: predate that block, so check it against the zoo before a table rests on it. Every key the
#: zoo leaves out keeps sb3-contrib 2.9.2's default:
#: CrossQ batch 256, gamma 0.99, Adam betas (0.5, 0.999), Batch Renormalization with 100k
#: warm-up steps, automatic entropy tuning; TQC lr 3e-4, batch 256, tau 0.005, gamma 0.99,
#: 2 critics of 25 quantiles with 256-256 layers, automatic entropy tuning. ``n_timesteps``
#: (5M for CrossQ, 1M for TQC) gives way to the budget.
SB3_ZOO: dict[str, dict[str, Any]] = {
    "crossq": {
        "buffer_size": 1_000_000,
        "learning_rate": 1e-3,
        "learning_starts": 5_000,
        "policy_delay": 3,
        "policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [2048, 2048]}},
    },
    "tqc": {"learning_starts": 10_000},
}
#: The zoo's per-env departures from the entries above (keyed by the env's name before "-v").
SB3_ZOO_ENV: dict[str, dict[str, dict[str, Any]]] = {
    "tqc": {"Hopper": {"top_quantiles_to_drop_per_net": 5}},
}


def sb3_hyperparams(algo: str, env_id: str) -> dict[str, Any]:
    """The zoo's keyword arguments for ``algo`` on ``env_id`` (see :data:`SB3_ZOO`)."""
    if algo not in SB3_ZOO:
        raise ValueError(f"no sb3-contrib peer for {algo!r}; sb3 runs {', '.join(SB3_ZOO)}")
    hp = copy.deepcopy(SB3_ZOO[algo])  # sb3 writes into policy_kwargs: keep the table clean
    hp.update(copy.deepcopy(SB3_ZOO_ENV.get(algo, {}).get(env_id.split("-")[0], {})))
    return hp


def _sb3_test(model: Any, envs: list[Any], seed: int) -> float:
    """The mean return of one episode on each of ``envs`` with deterministic actions (the mean
    of the squashed Gaussian, as the other libraries test), the envs stepped side by side and a
    finished one left alone; ``seed`` seeds this test's resets."""
    import numpy as np

    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    returns = [0.0] * len(envs)
    active = list(range(len(envs)))
    while active:
        actions, _ = model.predict(np.stack([obs[i] for i in active]), deterministic=True)
        still = []
        for i, action in zip(active, actions):
            obs[i], reward, terminated, truncated, _ = envs[i].step(action)
            returns[i] += float(reward)
            if not (terminated or truncated):
                still.append(i)
        active = still
    return float(np.mean(returns))


def trial_sb3(
    algo: str,
    env_id: str,
    seed: int,
    steps: int,
    interval: int,
    hp_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """sb3-contrib's CrossQ or TQC with the zoo's MuJoCo hyperparameters, on the same budget
    (its random warm-up, ``learning_starts``, counted in it) and test schedule as the other
    libraries: :data:`TEST_EPISODES` episodes every ``interval`` env steps, deterministic
    actions, from a callback of ours. Time: from building the envs to the end of ``learn``,
    tests included, as Tianshou's trial is timed. ``hp_overrides`` (smoke tests only: a
    shorter warm-up, smaller networks) go over the zoo's and are recorded with them."""
    import gymnasium as gym
    import sb3_contrib
    from stable_baselines3.common.callbacks import BaseCallback

    classes = {"crossq": sb3_contrib.CrossQ, "tqc": sb3_contrib.TQC}
    hp = {**sb3_hyperparams(algo, env_id), **(hp_overrides or {})}
    curve: list[tuple[int, float]] = []
    t0 = time.perf_counter()
    test_envs = [gym.make(env_id) for _ in range(TEST_EPISODES)]

    class Tests(BaseCallback):
        """Tests every ``interval`` env steps (one training env: one call per env step) from the
        end of the random warm-up on, where the other libraries' curves start too."""

        def _on_step(self) -> bool:
            step = self.num_timesteps
            if step % interval == 0 and step >= hp.get("learning_starts", 0):
                # each test's resets get their own seeds, away from the training env's
                test_seed = seed * 1_000 + 10_000_000 + len(curve) * TEST_EPISODES
                curve.append((self.num_timesteps, _sb3_test(self.model, test_envs, test_seed)))
            return True

    model = classes[algo]("MlpPolicy", gym.make(env_id), seed=seed, device="cpu", verbose=0, **hp)
    model.learn(total_timesteps=steps, callback=Tests())
    seconds = time.perf_counter() - t0
    for env in test_envs:
        env.close()
    return {
        "curve": curve,
        "seconds": seconds,
        "env_steps": int(model.num_timesteps),
        "sb3_contrib": sb3_contrib.__version__,
        "sb3_hyperparams": hp,
    }


# --------------------------------------------------------------------------------------------
# Parent: schedule, record, report
# --------------------------------------------------------------------------------------------


def _key(r: dict[str, Any]) -> tuple[str, str, str, int, int]:
    return (r["framework"], r["algo"], r["env"], int(r["seed"]), int(r["budget"]))


def load_results(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_trial(fw: str, algo: str, env: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    budget = budget_for(algo, args.steps)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_trial",
        fw,
        "--algos",
        algo,
        "--envs",
        env,
        "--_seed",
        str(seed),
        "--steps",
        str(budget),
        "--test-interval",
        str(interval_for(algo, args.test_interval)),
        "--torch-threads",
        str(args.torch_threads),
        "--tianshou-nan-check",
        args.tianshou_nan_check,
    ]
    for item in args.rlblocks_set:
        cmd += ["--rlblocks-set", item]
    base = {"framework": fw, "algo": algo, "env": env, "seed": seed, "budget": budget}
    return run_json_trial(cmd, base)


def _pair_ratio(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> str:
    """``median (max)`` over the seeds both libraries ran of rlblocks' wall / Tianshou's."""
    their_secs = {r["seed"]: r["seconds"] for r in theirs}
    ratios = [r["seconds"] / their_secs[r["seed"]] for r in ours if r["seed"] in their_secs]
    if not ratios:
        return "–"
    return f"{statistics.median(ratios):.2f} ({max(ratios):.2f})"


def _mean_std(xs: list[float]) -> str:
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.0f}"
    return f"{statistics.fmean(xs):.0f} ± {statistics.stdev(xs):.0f}"


def _welch_t(a: list[float], b: list[float]) -> str:
    """Welch's t of ``mean(a) - mean(b)`` with its Welch-Satterthwaite degrees of freedom, as
    "t (df)"; "–" with fewer than two values on a side or no spread at all."""
    if len(a) < 2 or len(b) < 2:
        return "–"
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return "–"
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return f"{t:+.2f} ({df:.1f})"


def build_report(results: list[dict[str, Any]], out_dir: str, command: str) -> str:
    """The markdown table (and the PNGs next to it) from every finished trial."""
    ok = [r for r in results if "error" not in r and r.get("curve")]
    envs = sorted({r["env"] for r in ok}, key=lambda e: (e != "Hopper-v5", e))
    algos = [a for a in ALGOS if any(r["algo"] == a for r in ok)]
    landed = [a for a in algos if PEER[a] == "tianshou"]
    lines = [
        "# MuJoCo at an equal env-step budget: rlblocks vs Tianshou (and sb3-contrib)",
        "",
        f"Produced by `{command}` (script: `contrib/benchmarks/mujoco_benchmark.py`, whose "
        "docstring lists both libraries' settings). Final = the last test's mean return over "
        f"{TEST_EPISODES} episodes, best = the best test; mean ± std over seeds. Wall = median "
        "seconds from the start of training to the end of the budget, tests and random warm-up "
        "included, one torch thread each. Wall ratio = rlblocks wall / Tianshou wall (below 1: "
        "rlblocks is faster). Pair ratio = the median over seeds of each seed's own ratio "
        "(its two trials ran back to back, so the VM's speed on the day cancels), the largest "
        "in brackets. Paper = Tianshou paper, table 2 (v3 tasks, 1M steps; PPO 3M), "
        "for orientation only. Welch t = Welch's t statistic of the final returns, rlblocks "
        "minus Tianshou, with its degrees of freedom: a two-sided 5% difference needs |t| "
        "above 2.78 at 4 degrees of freedom, 2.45 at 6, 2.31 at 8, 2.26 at 9 and 2.10 at 18 "
        "(5 or 10 seeds each), so smaller values say the two libraries are not told apart by "
        "these seeds. Seeds 103 and 104 were added to every cell after the first three, and "
        "105-109 to every cell later (both libraries, all cells alike, decided before any of "
        "them ran and reported whatever they showed: PPO's, then the off-policy cells' on "
        "2026-11-28, the last trials run on 2026-11-29). Hopper-v5 SAC was re-run whole, "
        "both libraries, on 2026-12-01/02 after rlblocks' SAC changed (its trials ran "
        "cca0b9d), on a quiet machine; Hopper-v5 DDPG the same way on 2026-12-02/03 (its "
        "trials ran dddb652 to f8b69b4; none changed what DDPG computes), and Hopper-v5 TD3 "
        "on 2026-12-03 (its trials ran 4df653a and be0c9b9; neither changed what TD3 "
        "computes). The earlier trials of these cells are kept beside the results. "
        "Trials kept beside the results (see the script's docstring) are not in the table. "
        "The two trials of a seed run back to back, but a cell's seeds may come from different "
        "days, and the "
        "VM's speed drifts between days (up to about 1.8x): compare wall seconds within a row. "
        "Whether a difference in returns comes from the learner is checked apart from seeds by "
        "`contrib/benchmarks/update_equivalence.py` (same weights, Adam state and sampled rows "
        "in both libraries): DDPG's gradients are the same to float rounding; TD3's differ in "
        "one place by design (rlblocks clips the smoothed target action, as the TD3 paper "
        "does) and its delayed actor's first step comes one step later, as in the paper; SAC's "
        "differ only in how the log-probability is rounded (the same mathematics, rlblocks' "
        "form exact where the policy saturates).",
        "",
        "| env | algo | budget | seeds | rlblocks final | Tianshou final | Welch t (df) | "
        "rlblocks best | Tianshou best | rlblocks wall s | Tianshou wall s | wall ratio | "
        "pair ratio (max) | paper (1M) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env in envs:
        for algo in landed:
            cells: dict[str, list[dict[str, Any]]] = {
                fw: [
                    r for r in ok if r["env"] == env and r["algo"] == algo and r["framework"] == fw
                ]
                for fw in ("rlblocks", "tianshou")
            }
            if not any(cells.values()):
                continue
            budgets = sorted({r["budget"] for rs in cells.values() for r in rs})
            seeds = {fw: len(rs) for fw, rs in cells.items()}
            final = {fw: [r["curve"][-1][1] for r in rs] for fw, rs in cells.items()}
            best = {fw: [max(v for _, v in r["curve"]) for r in rs] for fw, rs in cells.items()}
            wall = {fw: [r["seconds"] for r in rs] for fw, rs in cells.items()}
            med = {fw: statistics.median(w) if w else None for fw, w in wall.items()}
            ratio = (
                f"{med['rlblocks'] / med['tianshou']:.2f}"
                if med["rlblocks"] and med["tianshou"]
                else "–"
            )
            paper = TIANSHOU_PAPER.get(algo, {}).get(env.split("-")[0], "–")
            pair = _pair_ratio(cells["rlblocks"], cells["tianshou"])
            lines.append(
                f"| {env} | {algo} | {','.join(map(str, budgets))} | "
                f"{seeds['rlblocks']}/{seeds['tianshou']} | {_mean_std(final['rlblocks'])} | "
                f"{_mean_std(final['tianshou'])} | "
                f"{_welch_t(final['rlblocks'], final['tianshou'])} | "
                f"{_mean_std(best['rlblocks'])} | "
                f"{_mean_std(best['tianshou'])} | "
                f"{_secs(med['rlblocks'])} | {_secs(med['tianshou'])} | {ratio} | {pair} | "
                f"{paper} |"
            )
    lines += _paired_table(ok, envs, landed)
    lines += _sampled_ppo_section(ok, out_dir)
    lines += _new_rows_section(ok, envs)
    codes: dict[str, int] = {}
    for r in ok:
        if r["framework"] == "rlblocks":
            code = r.get("rlblocks_code", "not recorded")
            codes[code] = codes.get(code, 0) + 1
    lines += [
        "",
        "rlblocks code of the trials (`rlblocks_code` in results.jsonl; recorded from "
        "2026-11-29 on, the trials before ran commit 5494d6d or earlier): "
        + "; ".join(f"{code}: {n} trial{'s' * (n != 1)}" for code, n in sorted(codes.items())),
    ]
    done = {_key(r) for r in ok}
    errors = [r for r in results if "error" in r and _key(r) not in done]  # not since re-run
    if errors:
        lines += ["", "Failed trials:", ""]
        lines += [
            f"- {r['framework']} {r['algo']} {r['env']} seed {r['seed']}: "
            f"{r['error'].splitlines()[-1]}"
            for r in errors
        ]
    for env in envs:
        png = _plot(ok, env, algos, out_dir)
        if png:
            lines += ["", f"![{env}]({os.path.basename(png)})"]
    return "\n".join(lines) + "\n"


def _last_tests(r: dict[str, Any], k: int = 3) -> float:
    """The mean of a trial's last ``k`` test returns (less moved by one lucky or unlucky test
    than the final return alone)."""
    return statistics.fmean(v for _, v in r["curve"][-k:])


def _paired(diffs: list[float]) -> str:
    """``mean ± standard error (k of n ahead)`` of paired differences rlblocks minus Tianshou."""
    if not diffs:
        return "–"
    ahead = sum(d > 0 for d in diffs)
    if len(diffs) == 1:
        return f"{diffs[0]:+.0f} (1 pair, {'ahead' if ahead else 'behind'})"
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    return f"{statistics.fmean(diffs):+.0f} ± {se:.0f} ({ahead} of {len(diffs)} ahead)"


def _paired_table(ok: list[dict[str, Any]], envs: list[str], algos: list[str]) -> list[str]:
    """The same trials seed by seed (and budget): a seed's two trials share torch's seed,
    which for DDPG and TD3 gives both the same initial actor (the critics' weights and every
    later draw are each library's own), so pairing takes that start out of the comparison."""
    lines = [
        "",
        "Seed by seed: rlblocks minus Tianshou over the seeds both libraries ran (mean ± "
        "standard error of the paired differences, and on how many seeds rlblocks ended ahead), "
        "for the final return and for the mean of the last three tests of each trial (one test "
        f"of {TEST_EPISODES} episodes moves with the policy's swings, which are large for DDPG "
        "and TD3 this early in training).",
        "",
        "| env | algo | pairs | final: rlblocks - Tianshou | last 3 tests: rlblocks | "
        "last 3 tests: Tianshou | last 3 tests: rlblocks - Tianshou |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env in envs:
        for algo in algos:
            by_seed: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
            for r in ok:
                if r["env"] == env and r["algo"] == algo:
                    key = (int(r["seed"]), int(r["budget"]))
                    by_seed.setdefault(key, {})[r["framework"]] = r
            pairs = [p for _, p in sorted(by_seed.items()) if {"rlblocks", "tianshou"} <= set(p)]
            if not pairs:
                continue
            ours = [_last_tests(p["rlblocks"]) for p in pairs]
            theirs = [_last_tests(p["tianshou"]) for p in pairs]
            final = [p["rlblocks"]["curve"][-1][1] - p["tianshou"]["curve"][-1][1] for p in pairs]
            lines.append(
                f"| {env} | {algo} | {len(pairs)} | {_paired(final)} | {_mean_std(ours)} | "
                f"{_mean_std(theirs)} | {_paired([a - b for a, b in zip(ours, theirs)])} |"
            )
    return lines


#: The rows the issue's targets are about, and what they aim at: CrossQ or SAC with the SimBa
#: network at 1.5x the final return of the landed rlblocks SAC row on every env, and every new
#: row at least its peer's final return with at most half its wall-clock.
NEW_ROWS = ("crossq", "tqc", "sac-simba")
TARGET_OVER_SAC = 1.5
TARGET_OVER_SAC_ROWS = ("crossq", "sac-simba")
TARGET_WALL_RATIO = 0.5
#: What a seed of each new row costs, measured on 2026-12-07 (Hopper-v5, one torch thread, CPU
#: seconds of the trial's process per gradient step over 20-400 steps after a short warm-up, on
#: the shared 2-vCPU machine, where other work made a process's own CPU time read about 1.3x
#: high: rlblocks' SAC measured 0.015 s against the 0.0116 s per step of the landed row's quiet
#: 462 s). No 50k-step trial of these rows fitted in that session.
NEW_ROWS_COST: list[str] = [
    "",
    "Cost of one seed (one env, 50,000 env steps, one torch thread), from CPU seconds per "
    "gradient step measured on 2026-12-07 on Hopper-v5 (short runs on the shared machine, which "
    "read about 1.3x high against the landed SAC row's quiet wall; 20 steps for the large "
    "networks, so take them to 10-20%): rlblocks CrossQ 0.43 s x 45,000 steps, about 5.4 h; "
    "sb3-contrib CrossQ 0.48 s, about 5.9 h (the same network sizes: 2048-2048 critics, 256-256 "
    "actor); rlblocks TQC 0.135 s x 40,000, about 1.5 h (the paper's 5 critics of 512-512-512); "
    "sb3-contrib TQC 0.027 s, about 18 min (the zoo's 2 critics of 256-256); rlblocks SAC with "
    "SimBa 0.37 s x 40,000, about 4.1 h (critics of 2 blocks of 512 with 2048-wide "
    "bottlenecks); for scale, rlblocks SAC 0.015 s. So a seed of the five trials costs about "
    "17 CPU-hours per env (about 13 on a quiet core), 5 seeds on both envs about a week of one "
    "core: these networks are sized for a GPU. With these presets TQC's wall target (at most "
    "half of sb3-contrib's) cannot be met on a CPU, its networks being about five times the "
    "zoo's; CrossQ's compares networks of the same size.",
]
#: Seeds per cell in the landed table (5-10): a new cell with fewer is marked in the report.
LANDED_SEEDS = 5


def _final(r: dict[str, Any]) -> float:
    return float(r["curve"][-1][1])


def _seeds_note(n: int) -> str:
    """A cell's seed count, flagged when below the landed cells' (a 1-seed cell is one run)."""
    return f"{n} (1 seed only)" if n == 1 else (f"{n} (few)" if n < LANDED_SEEDS else str(n))


def _new_rows_section(ok: list[dict[str, Any]], envs: list[str]) -> list[str]:
    """CrossQ, TQC and SAC with the SimBa network: a table of each row against its peer
    (sb3-contrib with the zoo's settings, or none), then the targets, computed per env."""
    rows = [a for a in NEW_ROWS if any(r["algo"] == a for r in ok)]
    lines = [
        "",
        "## Newer learners: CrossQ, TQC and SAC with the SimBa network",
        "",
        "rlblocks' CrossQ and TQC with their MuJoCo presets (from their papers) against "
        "sb3-contrib's with RL Baselines3 Zoo's MuJoCo hyperparameters (the script's "
        "`SB3_ZOO`), and rlblocks' SAC with `algo.network=simba` (its MuJoCo preset otherwise; "
        "SimBa's own sizes: an actor of 1 block of width 128, critics of 2 blocks of 512), "
        "which has no peer: its target is the landed rlblocks SAC row above. Same budget, "
        "seeds, test schedule and one torch thread as the table above. Ratio = rlblocks / "
        "sb3-contrib (final return: above 1 is ahead; wall: below 1 is faster). The landed "
        f"cells have 5-10 seeds; a cell with fewer than {LANDED_SEEDS} is marked, and a "
        "1-seed cell is one run, not a mean: read its numbers as a first look. Run: "
        "`python contrib/benchmarks/mujoco_benchmark.py --envs Hopper-v5,HalfCheetah-v5 "
        "--algos crossq,tqc,sac-simba --steps 50000 --seeds 5 --out-dir docs/benchmarks/mujoco`.",
        *NEW_ROWS_COST,
    ]
    if not rows:
        return [*lines, "", "No trials of these rows yet (their cost per seed is above)."]
    lines += [
        "",
        "| env | algo | budget | seeds rlblocks / peer | rlblocks final | peer final | "
        "final ratio | rlblocks best | peer best | rlblocks wall s | peer wall s | wall ratio | "
        "pair ratio (max) | final / landed SAC |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    targets: list[str] = []
    for env in envs:
        sac = [_final(r) for r in ok if _cell(r, env, "sac", "rlblocks")]
        sac_mean = statistics.fmean(sac) if sac else None
        for algo in rows:
            peer = PEER[algo]
            ours = [r for r in ok if _cell(r, env, algo, "rlblocks")]
            theirs = [r for r in ok if peer and _cell(r, env, algo, peer)]
            if not ours and not theirs:
                continue
            a, b = [_final(r) for r in ours], [_final(r) for r in theirs]
            wa = statistics.median(r["seconds"] for r in ours) if ours else None
            wb = statistics.median(r["seconds"] for r in theirs) if theirs else None
            budgets = sorted({r["budget"] for r in ours + theirs})
            peer_seeds = _seeds_note(len(theirs)) if peer else "no peer"
            lines.append(
                f"| {env} | {algo} | {','.join(map(str, budgets))} | "
                f"{_seeds_note(len(ours))} / {peer_seeds} | {_mean_std(a)} | "
                f"{_mean_std(b) if peer else '–'} | {_ratio(a, b)} | "
                f"{_mean_std([max(v for _, v in r['curve']) for r in ours])} | "
                f"{_mean_std([max(v for _, v in r['curve']) for r in theirs]) if peer else '–'} | "
                f"{_secs(wa)} | {_secs(wb)} | "
                f"{f'{wa / wb:.2f}' if wa and wb else '–'} | {_pair_ratio(ours, theirs)} | "
                f"{_ratio(a, sac) if sac else '–'} |"
            )
        targets += _targets(ok, env, rows, sac_mean, len(sac))
    return [*lines, "", "Targets, per env (from the trials above):", "", *targets]


def _cell(r: dict[str, Any], env: str, algo: str, fw: str) -> bool:
    return r["env"] == env and r["algo"] == algo and r["framework"] == fw


def _ratio(a: list[float], b: list[float]) -> str:
    """``mean(a) / mean(b)``, or "–" when a side is empty or ``b``'s mean is not positive."""
    if not a or not b or statistics.fmean(b) <= 0:
        return "–"
    return f"{statistics.fmean(a) / statistics.fmean(b):.2f}"


def _targets(
    ok: list[dict[str, Any]], env: str, rows: list[str], sac_mean: float | None, sac_n: int
) -> list[str]:
    """One line per target for ``env``: met, not met, or not run yet, with the numbers."""

    def mean_final(algo: str, fw: str) -> tuple[float | None, int]:
        xs = [_final(r) for r in ok if _cell(r, env, algo, fw)]
        return (statistics.fmean(xs) if xs else None, len(xs))

    def seeds(n: int) -> str:
        return f"{n} seed{'s' * (n != 1)}"

    out = []
    if sac_mean is None:
        out.append(f"- {env}: no landed rlblocks SAC trials, so no 1.5x target.")
    else:
        goal = TARGET_OVER_SAC * sac_mean
        parts, met, ran = [], False, False
        for algo in TARGET_OVER_SAC_ROWS:
            mean, n = mean_final(algo, "rlblocks")
            if mean is None:
                parts.append(f"{algo} not run")
                continue
            ran, met = True, met or mean >= goal
            parts.append(f"{algo} {mean:.0f} ({mean / sac_mean:.2f}x, {seeds(n)})")
        verdict = "met" if met else ("not met" if ran else "not run")
        out.append(
            f"- {env}, CrossQ or SAC+SimBa at >= {TARGET_OVER_SAC}x the landed SAC row's final "
            f"return ({sac_mean:.0f} over {seeds(sac_n)}; goal {goal:.0f}): "
            + "; ".join(parts)
            + f": **{verdict}**."
        )
    for algo in rows:
        peer = PEER[algo]
        if peer is None:
            continue
        ours, n_ours = mean_final(algo, "rlblocks")
        theirs, n_theirs = mean_final(algo, peer)
        if ours is None or theirs is None:
            out.append(f"- {env}, {algo} against {LABELS[peer]}: not run on both sides yet.")
            continue
        walls = [
            (r, o)
            for r in ok
            if _cell(r, env, algo, "rlblocks")
            for o in ok
            if _cell(o, env, algo, peer) and o["seed"] == r["seed"]
        ]
        wall_ratio = (
            statistics.median(r["seconds"] / o["seconds"] for r, o in walls) if walls else None
        )
        final_ok = "met" if ours >= theirs else "not met"
        wall_ok = (
            "–" if wall_ratio is None else ("met" if wall_ratio <= TARGET_WALL_RATIO else "not met")
        )
        out.append(
            f"- {env}, {algo} against {LABELS[peer]} ({seeds(n_ours)} / {seeds(n_theirs)}): "
            f"final {ours:.0f} against {theirs:.0f}, at least the peer's: **{final_ok}**; "
            f"wall ratio (median of the seeds' own) "
            f"{'–' if wall_ratio is None else f'{wall_ratio:.2f}'}, at most "
            f"{TARGET_WALL_RATIO}: **{wall_ok}**."
        )
    return out


SAMPLED_PPO_FILE = "ppo-sampled-test-actions.jsonl"


def _sampled_ppo_section(ok: list[dict[str, Any]], out_dir: str) -> list[str]:
    """PPO under one test protocol. The table's PPO rows test differently: rlblocks' PPO tests
    the mean action (``deterministic_eval``, its default) while Tianshou's MuJoCo PPO example
    samples its test actions (``ProbabilisticActorPolicy``'s default). rlblocks' PPO trials
    re-run with sampled test actions (``--rlblocks-set algo.deterministic_eval=false``, same
    seeds and budget) are kept in ``SAMPLED_PPO_FILE`` and set against Tianshou's trials here."""
    path = os.path.join(out_dir, SAMPLED_PPO_FILE)
    if not os.path.exists(path):
        return []
    sampled = [r for r in load_results(path) if "error" not in r and r.get("curve")]
    lines = [
        "",
        "PPO under one test protocol. SAC tests the mean action in both libraries (both "
        "defaults), DDPG and TD3 act deterministically in tests, but the PPO rows above do not "
        "compare like with like: rlblocks' PPO tests the mean action (`deterministic_eval`, "
        "its default) while Tianshou's MuJoCo PPO example samples its test actions. rlblocks' "
        "PPO re-run with sampled test actions (`--rlblocks-set algo.deterministic_eval=false`, "
        "the same seeds and budget, rlblocks only; `" + SAMPLED_PPO_FILE + "`; its walls are "
        "not comparable, other work shared the machine) against the table's Tianshou trials:",
        "",
        "| env | pairs | rlblocks final (sampled) | Tianshou final (sampled) | Welch t (df) | "
        "final: rlblocks - Tianshou | last 3 tests: rlblocks - Tianshou |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for env in sorted({r["env"] for r in sampled}, key=lambda e: (e != "Hopper-v5", e)):
        ours = {
            (int(r["seed"]), int(r["budget"])): r
            for r in sampled
            if r["env"] == env and r["algo"] == "ppo" and r["framework"] == "rlblocks"
        }
        theirs = {
            (int(r["seed"]), int(r["budget"])): r
            for r in ok
            if r["env"] == env and r["algo"] == "ppo" and r["framework"] == "tianshou"
        }
        keys = sorted(ours.keys() & theirs.keys())
        if not keys:
            continue
        a = [ours[k]["curve"][-1][1] for k in keys]
        b = [theirs[k]["curve"][-1][1] for k in keys]
        last = [_last_tests(ours[k]) - _last_tests(theirs[k]) for k in keys]
        lines.append(
            f"| {env} | {len(keys)} | {_mean_std(a)} | {_mean_std(b)} | {_welch_t(a, b)} | "
            f"{_paired([x - y for x, y in zip(a, b)])} | {_paired(last)} |"
        )
    return lines


def _secs(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def _plot(results: list[dict[str, Any]], env: str, algos: list[str], out_dir: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        print("matplotlib is not installed: no plots", file=sys.stderr)
        return None
    fig, axes = plt.subplots(1, len(algos), figsize=(4.2 * len(algos), 3.4), squeeze=False)
    for ax, algo in zip(axes[0], algos):
        for fw, colour in zip(FRAMEWORKS, ("tab:blue", "tab:orange", "tab:green")):
            runs = [
                r["curve"]
                for r in results
                if r["env"] == env and r["algo"] == algo and r["framework"] == fw
            ]
            if not runs:
                continue
            grid = sorted({s for c in runs for s, _ in c})
            ys = np.array([np.interp(grid, [s for s, _ in c], [v for _, v in c]) for c in runs])
            mean, std = ys.mean(axis=0), ys.std(axis=0)
            ax.plot(grid, mean, color=colour, label=f"{fw} ({len(runs)} seeds)")
            ax.fill_between(grid, mean - std, mean + std, color=colour, alpha=0.2)
        ax.set_title(f"{env} {algo.upper()}")
        ax.set_xlabel("env steps")
        ax.set_ylabel("test return")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{env}.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="Hopper-v5,HalfCheetah-v5")
    parser.add_argument(
        "--algos", default=",".join(DEFAULT_ALGOS), help=f"a comma list of {', '.join(ALGOS)}"
    )
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help="a comma list of rlblocks, tianshou, sb3; each row runs rlblocks and its one peer "
        "(Tianshou for sac/td3/ddpg/ppo, sb3-contrib for crossq/tqc, none for sac-simba)",
    )
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--test-interval", type=int, default=5_000)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out-dir", default="docs/benchmarks/mujoco")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--tianshou-nan-check",
        choices=("on", "off"),
        default="on",
        help="Tianshou 2.0.1's scan of its whole replay buffer for NaNs after every collect: on "
        "as released (its cost grows with the buffer; thu-ml/tianshou#1265), off to time "
        "Tianshou without it (use another --out-dir: results are keyed without it)",
    )
    parser.add_argument(
        "--rlblocks-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the rlblocks trials (as `rlblocks train --set`; repeatable), "
        "e.g. to try a setting on the tuning seeds 0-2 (--first-seed 0); results are keyed "
        "without it, so use another --out-dir",
    )
    parser.add_argument("--_trial", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag, given, known in (
        ("--algos", args.algos, ALGOS),
        ("--frameworks", args.frameworks, FRAMEWORKS),
    ):
        unknown = [x for x in given.split(",") if x not in known]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {','.join(known)}")
    frameworks = args.frameworks.split(",")
    if "sb3" in frameworks and importlib.util.find_spec("sb3_contrib") is None:
        print("skipped sb3-contrib: it is not installed (pip install sb3-contrib)", file=sys.stderr)
        frameworks.remove("sb3")

    if args._trial:  # child: one trial, one JSON line
        import torch

        torch.set_num_threads(args.torch_threads)
        trial = (args.algos, args.envs, args._seed, args.steps, args.test_interval)
        if args._trial == "rlblocks":
            out = trial_rlblocks(*trial, extra=args.rlblocks_set)
        elif args._trial == "sb3":
            out = trial_sb3(*trial)
        else:
            out = trial_tianshou(*trial, nan_check=args.tianshou_nan_check)
        print(json.dumps(out), flush=True)
        return 0

    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "results.jsonl")
    results = load_results(path)
    command = "python contrib/benchmarks/mujoco_benchmark.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a != "--report-only"
    )
    if not args.report_only:
        done = {_key(r) for r in results if "error" not in r}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for env in args.envs.split(","):
                for algo in args.algos.split(","):
                    for fw in frameworks:
                        if fw != "rlblocks" and fw != PEER[algo]:
                            continue  # each row has rlblocks and its one peer (see PEER)
                        key = (fw, algo, env, seed, budget_for(algo, args.steps))
                        if key in done:
                            continue
                        r = run_trial(fw, algo, env, seed, args)
                        results.append(r)
                        with open(path, "a", encoding="utf-8") as f:
                            f.write(json.dumps(r) + "\n")
                        last = r["curve"][-1][1] if r.get("curve") else float("nan")
                        print(
                            f"{fw} {algo} {env} seed {seed}: final {last:.0f} in "
                            f"{r.get('seconds', float('nan')):.0f} s"
                            + (f" ERROR {r['error']}" if "error" in r else ""),
                            flush=True,
                        )
                        _write_report(results, args.out_dir, command)
    report = _write_report(results, args.out_dir, command)
    print(report)
    return 0


def _write_report(results: list[dict[str, Any]], out_dir: str, command: str) -> str:
    report = build_report(results, out_dir, command)
    with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as f:
        f.write(report)
    return report


if __name__ == "__main__":
    raise SystemExit(main())
