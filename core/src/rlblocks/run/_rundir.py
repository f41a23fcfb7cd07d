"""Reading runs back: the test record every run directory keeps, learning-curve plots over
several runs, and readable descriptions of a run directory and of an algorithm's config.

Every run with a directory appends one row per test to ``RUN_DIR/tests.csv`` (env step, wall
seconds, gradient steps, mean/std/min/max test return, mean length, episodes, and whether it was
a screen: the first few episodes of a test that ended it early because the stop reward was out
of reach), whatever loggers it uses, so ``rlblocks plot`` works on any run. A run on a game env
(whose episodes end with ``info["outcome"]``) adds the learner's ``win_rate``, ``draw_rate`` and
``loss_rate`` columns.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import io
import json
import math
import os
import shlex
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlblocks.collect import OUTCOME_RATES
from rlblocks.contracts import CheckpointError, ConfigError, RlblocksError
from rlblocks.plugins import hookimpl
from rlblocks.run._advice import option
from rlblocks.run._checkpoint import (
    CURRENT,
    SIDECAR,
    GenerationStore,
    _read_checkpoint,
    check_file,
    checkpoint_content_problem,
    sidecar_of,
    verify_file,
    write_verified,
)

TESTS_FILE = "tests.csv"
TEST_COLUMNS = (
    "env_step",
    "wall_seconds",
    "gradient_steps",
    "return_mean",
    "return_std",
    "return_min",
    "return_max",
    "length_mean",
    "episodes",
    "screen",
)
#: columns a run on a game env adds (``info["outcome"]`` of its test episodes): the learner's
#: win, draw and loss rates; other runs' files have none of them
OUTCOME_COLUMNS = OUTCOME_RATES
#: the column a multi-agent run adds: agent transitions so far (its ``env_step`` column counts
#: env steps, whatever ``trainer.count_steps_by`` counts); single-agent runs' files have none
AGENT_STEPS_COLUMN = "agent_steps"


class TestRecorder:
    """A hook object that appends each test of a run to ``RUN_DIR/tests.csv``."""

    __test__ = False  # not a pytest test class

    def __init__(self, run_dir: Path, trainer_state: Any) -> None:
        self.path = Path(run_dir) / TESTS_FILE
        self._state = trainer_state  # a callable returning the trainer's live TrainerState

    def truncate_after(self, step: int, column: str = "env_step") -> None:
        """Drop rows whose ``column`` is past ``step`` (a resumed run repeats the steps after its
        checkpoint); offline runs count ``gradient_steps``, as they take no env step."""
        if not self.path.is_file():
            return
        # (files written before the agent_steps column held agent steps in env_step)
        rows = [r for r in read_tests(self.path.parent) if r.get(column, r["env_step"]) <= step]
        self._write(rows)

    def _write(self, rows: Sequence[Mapping[str, float]]) -> None:
        """Rewrite the file with ``rows``: atomically, with a checksum sidecar."""
        buf = io.StringIO()
        w = csv.writer(buf)
        games = any(c in r for r in rows for c in OUTCOME_COLUMNS)
        columns = (*TEST_COLUMNS, *OUTCOME_COLUMNS) if games else TEST_COLUMNS
        if any(AGENT_STEPS_COLUMN in r for r in rows):  # a multi-agent run's agent steps
            columns = (*columns, AGENT_STEPS_COLUMN)
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(r.get(c, math.nan)) for c in columns])
        text = buf.getvalue()
        write_verified(self.path, lambda fh: fh.write(text), "w")

    @hookimpl
    def rlblocks_test_end(self, stats: Mapping[str, Any], env_step: int) -> None:
        # a screened test (one that ended on its first episodes) is a row too, marked screen=1;
        # ``env_step`` is the env step for every test (0 offline, where gradient_steps counts)
        self._append(stats, env_step, screen=bool(stats.get("screened", False)))

    def _append(self, stats: Mapping[str, Any], env_step: int, screen: bool) -> None:
        st = self._state()
        # a multi-agent run counts env steps apart from its progress (which may count agent
        # steps): ``env_step`` holds env steps, ``agent_steps`` the agent transitions
        taken = getattr(st, "env_steps_taken", None)
        row = {
            "env_step": int(env_step if taken is None else taken),
            "wall_seconds": float(getattr(st, "wall_seconds", math.nan)),
            "gradient_steps": int(getattr(st, "gradient_step", 0)),
            "return_mean": stats.get("return_mean", math.nan),
            "return_std": stats.get("return_std", math.nan),
            "return_min": stats.get("return_min", math.nan),
            "return_max": stats.get("return_max", math.nan),
            "length_mean": stats.get("length_mean", math.nan),
            "episodes": int(stats.get("n_episode", 0)),
            "screen": int(screen),
        }
        row.update({c: stats[c] for c in OUTCOME_COLUMNS if c in stats})
        agent_steps = getattr(st, "agent_steps", None)
        if agent_steps is not None:
            row[AGENT_STEPS_COLUMN] = int(agent_steps)
        # the whole (small) file is rewritten, so it and its checksum always agree
        rows = read_tests(self.path.parent) if self.path.is_file() else []
        self._write([*rows, row])


def _fmt(v: Any) -> str:
    if isinstance(v, int | np.integer):
        return str(int(v))
    v = float(v)
    return "nan" if math.isnan(v) else repr(v)


def read_tests(run_dir: str | os.PathLike[str]) -> list[dict[str, float]]:
    """The rows of a run's ``tests.csv`` as dicts of floats (env steps as ints)."""
    path = Path(run_dir) / TESTS_FILE
    if not path.is_file():
        raise CheckpointError(
            f"{run_dir} has no {TESTS_FILE}: no test finished in it yet (or it is not a run "
            "directory)"
        )
    check_file(path)
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for k, row in enumerate(csv.DictReader(f)):
            try:
                rec = {
                    c: float(row[c])
                    for c in (*TEST_COLUMNS, *OUTCOME_COLUMNS, AGENT_STEPS_COLUMN)
                    if row.get(c) not in (None, "")
                }
                for c in ("env_step", "episodes", "screen", "gradient_steps", AGENT_STEPS_COLUMN):
                    if c in rec:
                        rec[c] = int(rec[c])
            except (KeyError, ValueError) as exc:
                raise CheckpointError(f"{path}, row {k + 2}: damaged ({exc})") from exc
            out.append(rec)
    return out


RESULT_FILE = "result.json"


def read_result(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A run's ``result.json`` (what a finished run wrote), or None when it has none. A damaged
    one is a CheckpointError that says what ``rlblocks resume`` and ``describe`` both say: the
    run's state is unknown until the file is restored or removed."""
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        return None
    problem = ""
    data: Any = None
    if verify_file(path):
        problem = f"its size or checksum differs from {sidecar_of(path).name}"
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problem = str(exc)
        else:
            if not isinstance(data, dict) or not isinstance(data.get("env_steps"), int | float):
                problem = "it holds no env_steps count"
    if problem:
        sidecar = sidecar_of(path)
        delete = f"delete it and {sidecar.name}" if sidecar.is_file() else "delete it"
        raise CheckpointError(
            f"{path} is damaged ({problem}), so whether the run finished is unknown; restore it "
            f"from a copy, or {delete} to continue the run from its last checkpoint"
        )
    return data


def run_label(run_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """(algo, env id) of a run, from its ``config.json``."""
    path = Path(run_dir) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return str(data["algo_name"]), str(data["env"]["id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{run_dir}: cannot read the run's config.json ({exc})") from exc


#: the folder inside a run directory where ``train --overwrite`` keeps the run it replaces until
#: the new run has been built (from which a failed start puts it back); one that a killed start
#: left behind holds the earlier run, which is no run of its own
REPLACED_DIR = ".replaced-run"
#: a set-aside run being deleted once the new run has started (renamed first, so a kill during
#: the deletion leaves no half-deleted ``.replaced-run``); never a run, deleted at the next start
DISCARDED_PREFIX = ".discarded-run-"


def replaced_run_note(run_dir: str | os.PathLike[str]) -> str | None:
    """What ``run_dir/.replaced-run`` is, when a start with ``--overwrite`` that was killed
    left one (and no run holds the directory now): the earlier run, kept there, and how to
    restore or discard it; None when there is none."""
    held = Path(run_dir) / REPLACED_DIR
    if not held.is_dir() or held.is_symlink() or RunDirLock.holder(run_dir) is not None:
        return None  # nothing set aside, or a start running now that deals with it itself
    return (
        f"an earlier run is kept in {held}: a start with {option('overwrite=True', '--overwrite')}"
        " was interrupted before its new run began, so the run it replaces was set aside, not "
        f"deleted; to restore it, move everything in {held} back into {run_dir} (replacing what "
        f"has the same name) and delete the empty {REPLACED_DIR}; to discard it, delete {held}"
    )


class RunDirLock:
    """An exclusive lock on a run directory (``RUN_DIR/.lock``, an OS file lock that dies with
    its process), so two runs never write one directory at once."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = _open_lock_file(self.path)
        except OSError as exc:
            raise CheckpointError(
                f"cannot write the run directory {self.path.parent}: {exc.strerror or exc}; "
                "pick a directory you can write to (--run-dir)"
            ) from exc
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, as before
            self._fd = fd
            return
        # a short retry: holder() (rlblocks describe) probes the lock for an instant
        deadline = time.monotonic() + 0.5
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
            holder = _lock_pid(fd)
            os.close(fd)
            raise ConfigError(
                f"run directory {self.path.parent} is in use by another run (pid {holder}); "
                "wait for it to finish or pick another --run-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    @staticmethod
    def holder(run_dir: str | os.PathLike[str]) -> str | None:
        """The pid of the run that holds ``run_dir`` now (``"?"`` if it wrote none), or None.
        The probe takes a shared lock for an instant, which :meth:`acquire`'s retry rides out;
        without POSIX locks it cannot tell and says None."""
        try:
            import fcntl
        except ImportError:
            return None
        try:  # a symbolic link is no lock of this directory's (and is refused by acquire)
            fd = os.open(Path(run_dir) / ".lock", os.O_RDONLY | _NOFOLLOW)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return _lock_pid(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None


#: ``os.O_NOFOLLOW`` where the OS has it: opening a symbolic link then fails instead of
#: opening whatever it points to
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open_lock_file(path: Path) -> int:
    """A descriptor of the lock file ``path``, created when missing. The file is truncated and
    rewritten, so it must be the directory's own: a symbolic link (which would truncate its
    target), a hard link or anything but a regular file is refused with a ConfigError."""
    import stat

    refuse = ConfigError(
        f"{path} is not a plain file of the run directory (a symbolic or hard link, or a special "
        "file), so the run cannot lock the directory without writing elsewhere; delete it (what "
        "it points to is left alone) and start again"
    )
    if path.is_symlink():
        raise refuse
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o644)
    except OSError:
        if path.is_symlink():  # planted between the check and the open
            raise refuse from None
        raise  # an unwritable directory: the caller says so
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise refuse
    return fd


def _lock_pid(fd: int) -> str:
    """The pid a lock holder wrote into the lock file (``"?"`` if none)."""
    return os.read(fd, 64).decode(errors="replace").strip() or "?"


def verify_run(run_dir: str | os.PathLike[str]) -> list[str]:
    """Every problem with the files a run wrote (empty when all are whole): each file with a
    checksum sidecar (``config.json``, ``result.json``, ``tests.csv``, ``best.pt``, ...) and
    every checkpoint generation against its manifest. The run's own files are read too, as
    their readers read them (``best.pt`` through ``torch.load(weights_only=True)``, which runs no
    code from it), so one whose checksum file was deleted is still caught when it cannot be read.
    Logs are left to their own readers (TensorBoard's event records carry their own checksums)."""
    run_dir = Path(run_dir)
    problems = []
    damaged: set[Path] = set()
    for sidecar in sorted(run_dir.rglob(f"*{SIDECAR}")):
        target = sidecar.with_name(sidecar.name[: -len(SIDECAR)])
        if not target.is_file():
            problems.append(f"{target} is missing (its checksum file {sidecar.name} is there)")
        elif problem := verify_file(target):
            problems.append(problem)
            damaged.add(target)
    for target in _readable_run_files(run_dir):
        if target not in damaged and (problem := _unreadable(target)):
            problems.append(problem)
    store = GenerationStore(run_dir / "checkpoints")
    gens = store.generations()
    for gen in gens:
        if problem := store.verify(gen):
            problems.append(f"checkpoint {problem}")
    current = store._current_name()
    if gens and current not in {g.name for g in gens}:
        current = current if current is not None else "(unreadable)"
        problems.append(
            f"{store.root / CURRENT} names {current!r}, which is no generation; the newest whole "
            "generation is used"
        )
    return problems


def _readable_run_files(run_dir: Path) -> list[Path]:
    """The files of a run that :func:`verify_run` reads as their readers do: its JSON files,
    ``tests.csv`` and the checkpoints outside a generation (``best.pt``; ``latest.pt`` of the
    single-file layout of rlblocks 0.1)."""
    names = ["config.json", "plugins.json", "result.json", "tests.csv",
             "checkpoints/best.pt", "checkpoints/latest.pt"]  # fmt: skip
    return [run_dir / name for name in names if (run_dir / name).is_file()]


def _unreadable(path: Path) -> str:
    """Empty when ``path`` reads as what it should be; else what is wrong with it, in the words
    of the reader that would refuse it (``load``, ``resume``, ``describe``, ``plot``)."""
    if path.suffix == ".pt":
        try:
            payload = _read_checkpoint(path)
        except CheckpointError as exc:
            return str(exc)  # names the file and what it is not
        return checkpoint_content_problem(path, payload)

    try:
        if path.name == "result.json":
            read_result(path.parent)
        elif path.name == "config.json":
            _read_run_config(path)
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        else:
            read_tests(path.parent)
    except CheckpointError as exc:
        return str(exc)
    except RlblocksError as exc:  # a config.json that resume would refuse
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        return f"{path} does not read as a run's config: {detail}"
    except (OSError, ValueError) as exc:
        return f"{path} is damaged: it is not valid JSON ({exc}); restore it from a copy"
    return ""


def _read_run_config(path: Path) -> None:
    """Read a run's ``config.json`` as ``resume`` reads it (its checksum, then every section
    and field checked against the installed plugins); its refusal is the caller's problem."""
    from rlblocks.run import _config as cfg
    from rlblocks.run._compose import spec_lookup

    cfg.read_config(path, spec_lookup)


def default_run_dir(algo: str, env_id: str) -> Path:
    """A new folder ``runs/ALGO-ENV-STAMP`` for a run nobody named, reserved by creating it:
    two runs started in the same second (two processes, or two calls in a script) get
    ``...-STAMP`` and ``...-STAMP-2`` instead of the second being refused as a resume."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{algo}-{env_id.replace('/', '_')}-{stamp}"
    for n in range(1, 10_000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir(parents=True)  # atomic: of two processes, one gets each name
        except FileExistsError:
            continue
        except OSError:  # unwritable: the caller's own check names the problem and the fix
            return path
        return path
    raise ConfigError(f"{base}: 10,000 runs already hold this name; pass a run directory")


#: what a run writes into its directory (``--overwrite`` removes exactly these)
RUN_FILES = ("config.json", "plugins.json", "result.json", "tests.csv", "buffer.h5")


RUN_DIRS = ("checkpoints", "logs")


def set_aside_run(run_dir: Path) -> Path | None:
    """Move the files of the run in ``run_dir`` into ``run_dir/.replaced-run`` (renames, on the
    same file system) and return that folder; None when there was nothing to move. A folder
    left there by a start that was killed is put back first, so no run is ever lost."""
    held = run_dir / REPLACED_DIR
    refuse_symlinks(run_dir)  # nothing is moved into, or out of, a place a link points to
    if held.is_dir():
        put_back_run(run_dir, held)
    names = [
        p.name
        for name in (*RUN_FILES, *RUN_DIRS)
        for p in (run_dir / name, sidecar_of(run_dir / name))
        if p.exists() or p.is_symlink()
    ]
    if not names:
        return None
    held.mkdir()
    for name in names:
        os.replace(run_dir / name, held / name)
    return held


def put_back_run(run_dir: Path, held: Path) -> None:
    """Undo :func:`set_aside_run`: move every file in ``held`` back into ``run_dir`` (replacing
    what a failed start wrote under the same names) and remove ``held``."""
    for path in list(held.iterdir()):
        target = run_dir / path.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(path, target)
    held.rmdir()


def discard_replaced_run(held: Path) -> None:
    """Delete the run ``--overwrite`` set aside, once the new run has started. It is renamed
    to a ``.discarded-run-*`` folder first, so a kill in the middle of the deletion never leaves
    a half-deleted ``.replaced-run`` that a later ``--overwrite`` would put back as the old run
    (what is left of a discarded one is deleted at the next start in that directory)."""
    doomed = held.with_name(f"{DISCARDED_PREFIX}{uuid.uuid4().hex[:8]}")
    try:
        os.replace(held, doomed)
    except OSError:
        return  # gone already, or not ours to move: nothing is deleted under the old name
    shutil.rmtree(doomed, ignore_errors=True)


def remove_stale_temporaries(run_dir: Path) -> None:
    """Delete temporary files a killed run left behind (``.NAME.*.tmp`` of atomic writes) and
    what is left of a set-aside run whose deletion was cut short (``.discarded-run-*``)."""
    for leftover in run_dir.glob(f"{DISCARDED_PREFIX}*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "logs"):
        if folder.is_dir() and not folder.is_symlink():
            for tmp in folder.glob(".*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()


#: the folder a memory-mapped buffer of a run keeps its arrays in, unless buffer.path says
#: otherwise
BUFFER_DIR = "buffer"


def refuse_symlinks(run_dir: str | os.PathLike[str]) -> None:
    """Refuse (one line naming it) a symbolic link among the entries a run writes in
    ``run_dir``: its files and their checksum files, ``.lock``, ``logs/`` and the entries
    directly in it, everything under ``checkpoints/`` and the memory-mapped ``buffer/``, and the
    same in a ``.replaced-run`` that ``--overwrite`` left. A run writes through none of them
    (the link could send its files anywhere); the link and its target are left alone."""
    run_dir = Path(run_dir)
    for folder in (run_dir, run_dir / REPLACED_DIR):
        if folder != run_dir and (folder.is_symlink() or not folder.is_dir()):
            continue  # a symbolic .replaced-run is named below, as an entry of run_dir
        link = _symlinked_entry(folder)
        if link is not None:
            raise ConfigError(
                f"{link} is a symbolic link inside the run directory; a run never writes "
                "through one (it could send the run's files anywhere): replace it with the "
                "file or folder itself, or delete it (its target is left alone)"
            )


def _symlinked_entry(run_dir: Path) -> Path | None:
    """The first symbolic link among the entries a run writes in ``run_dir``, else None."""
    names = [*RUN_FILES, *RUN_DIRS, BUFFER_DIR, ".lock", REPLACED_DIR]
    entries = [run_dir / n for n in names] + [sidecar_of(run_dir / n) for n in RUN_FILES]
    for entry in entries:
        if entry.is_symlink():
            return entry
    logs = run_dir / "logs"
    if logs.is_dir():  # the loggers' own files (their insides are theirs to manage)
        for entry in sorted(logs.iterdir()):
            if entry.is_symlink():
                return entry
    for folder in (run_dir / "checkpoints", run_dir / BUFFER_DIR):
        for root, dirs, files in os.walk(folder):  # never descends into a link
            for name in sorted(dirs + files):
                if (Path(root) / name).is_symlink():
                    return Path(root) / name
    return None


def _remove_failed_start(run_dir: Path, before: set[str], made_dir: bool) -> None:
    """Remove what a new run that failed before training created in ``run_dir`` (its lock,
    its loggers' folders, buffer files): the entries that were not there before it, and the
    directory itself when the run created it. Nothing that was there before is touched."""
    import shutil

    try:
        created = [run_dir / name for name in os.listdir(run_dir) if name not in before]
    except OSError:
        return
    for path in created:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    if made_dir:
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # only when empty


def refuse_existing_run(run_dir: str | os.PathLike[str], overwrite: bool = False) -> None:
    """A new run never lands on an old one unasked: ``run_dir`` holding a run is refused unless
    ``overwrite``; a path that is a file (or under one) is refused too."""
    for part in (Path(run_dir), *Path(run_dir).parents):
        if part.exists() and not part.is_dir():
            raise ConfigError(
                f"run directory {run_dir}: {part} is a file, not a directory; pick another "
                "--run-dir"
            )
    replaced = replaced_run_note(run_dir)
    if replaced and not overwrite:
        replace = option("overwrite=True", "--overwrite")
        raise ConfigError(
            f"{replaced}; a new run there is refused until one or the other is done (or pass "
            f"{replace}, which puts the earlier run back and replaces it)"
        )
    if (Path(run_dir) / "config.json").is_file() and not overwrite:
        cont = option(
            f"rlblocks.resume({str(run_dir)!r})", f"`rlblocks resume {shlex.quote(str(run_dir))}`"
        )
        replace = option("overwrite=True", "--overwrite")
        raise ConfigError(
            f"{run_dir} already holds a run; continue it with {cont}, or pass {replace} to "
            "replace it"
        )


def _finished(run_dir: Path) -> tuple[int, int, str] | None:
    """(env steps, gradient steps, stop reason) of a run that wrote its result, else None; a
    damaged ``result.json`` is a CheckpointError (``rlblocks describe`` says the same)."""
    data = read_result(run_dir)
    if data is None:
        return None
    return (
        int(data["env_steps"]),
        int(data.get("gradient_steps") or 0),
        str(data.get("stop_reason") or "finished"),
    )
