"""Suite-wide settings."""

import torch

# Small networks run fastest on one thread; with OpenMP's default of one per core, a busy
# 2-core CI machine makes tiny backward passes spin for milliseconds (rlblocks.train sets this
# for runs through run.torch_threads).
torch.set_num_threads(1)


def pytest_sessionfinish(session) -> None:
    """Write this process's coverage data when its tests are done, before its teardown: an
    xdist worker that takes longer than a few seconds to exit (threads of Ray, loggers, env
    workers being reaped) is killed by xdist, and would take its measurements with it."""
    try:
        import coverage
    except ImportError:
        return
    current = coverage.Coverage.current()
    if current is not None:
        current.save()
