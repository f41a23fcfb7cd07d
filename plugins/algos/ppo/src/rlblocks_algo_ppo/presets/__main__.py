import sys

from rlblocks_algo_ppo.presets import preset_path

print(preset_path(sys.argv[1] if len(sys.argv) > 1 else "mujoco"))
