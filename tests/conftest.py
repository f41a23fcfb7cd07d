"""Suite-wide settings."""

import torch

# Small networks run fastest on one thread; with OpenMP's default of one per core, a busy
# 2-core CI machine makes tiny backward passes spin for milliseconds (rlblocks.train sets this
# for runs through run.torch_threads).
torch.set_num_threads(1)
