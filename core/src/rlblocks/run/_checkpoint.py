"""Atomic files: checkpoints (torch, loaded with ``weights_only``) and small JSON documents,
and checkpoint generations (several files committed together, verified on load).

Every write goes to a temporary file in the target's directory, is flushed and fsynced, then
renamed over the target, so a crash leaves either the old file or the new one, never half of one.
Loading a checkpoint never unpickles code: only tensors and plain containers are accepted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rlblocks.contracts import CheckpointError


def _write_failure(exc: BaseException) -> OSError | None:
    """The OSError behind a failed write (a full disk, a read-only file system...): ``exc``
    itself, or the one torch's and h5py's writers raised and then reported as their own
    RuntimeError; None for any other failure (a bug, which keeps its traceback)."""
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        if isinstance(node, OSError) and not isinstance(node, CheckpointError):
            return node
        seen.add(id(node))
        node = node.__cause__ or node.__context__
    return None


#: what to do once the disk has room again: files written before are whole (every write is
#: atomic), and a run continues from its last checkpoint
AFTER_RUN_WRITE = (
    "then try again: what was written before is intact (a run continues from its last "
    "checkpoint with `rlblocks resume`)"
)


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], after: str = AFTER_RUN_WRITE) -> Iterator[None]:
    """Inside, a write that fails for want of disk space or permission is a CheckpointError
    naming ``path``, the reason and the fix, then ``after`` (what to do next), in one line (the
    files written before are untouched: every write is atomic)."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as exc:
        cause = _write_failure(exc)
        if cause is None:
            raise
        text = str(cause)
        full = cause.errno == errno.ENOSPC or os.strerror(errno.ENOSPC) in text
        if full:
            reason = os.strerror(errno.ENOSPC)  # h5py says it in a paragraph of details
        else:
            reason = cause.strerror or (text.strip().splitlines() or ["an OS error"])[0]
        fix = "free space on that disk" if full else "make it writable"
        raise CheckpointError(f"cannot write {path}: {reason}; {fix}, {after}") from exc


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on success fsync and rename it onto
    ``path``; on failure remove it and leave ``path`` untouched."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with writing(path), os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        with writing(path):
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the OS allows
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    with atomic_write(path, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, allow_nan=False, default=str)
        fh.write("\n")


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Save a dict of tensors and plain values (state dicts, counters) atomically."""
    import torch

    with atomic_write(path, "wb") as fh:
        torch.save(payload, fh)


# -- files with a checksum sidecar: run files outside a generation ---------------------------
SIDECAR = ".sha256"


def sidecar_of(path: str | os.PathLike[str]) -> Path:
    """The checksum file beside ``path`` (``best.pt`` -> ``best.pt.sha256``)."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR)


def _write_sidecar(path: Path, digests: list[dict[str, Any]]) -> None:
    with atomic_write(sidecar_of(path), "w") as fh:
        for d in digests:
            fh.write(f"{d['sha256']}  {d['size']}\n")


def write_verified(
    path: str | os.PathLike[str], write: Callable[[IO[Any]], None], mode: str = "wb"
) -> None:
    """Write ``path`` atomically (``write(fh)`` fills it) with a checksum sidecar.

    While the new file replaces the old one, the sidecar accepts both, so a crash at any moment
    leaves a file that matches it: first the sidecar lists the new digest and the current
    file's, then the file is replaced, then the sidecar keeps the new digest alone."""
    path = Path(path)
    previous = [file_digest(path)] if path.is_file() else []
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with writing(path):
            with os.fdopen(fd, mode) as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            new = file_digest(tmp)
            _write_sidecar(path, [new, *previous])
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    _write_sidecar(path, [new])


def verify_file(path: str | os.PathLike[str]) -> str:
    """Empty when ``path`` matches its checksum sidecar (or has none); else what is wrong."""
    path = Path(path)
    sidecar = sidecar_of(path)
    if not sidecar.is_file():
        return ""
    try:
        lines = sidecar.read_text(encoding="utf-8").splitlines()
        accepted = [tuple(ln.split()) for ln in lines if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        return f"{sidecar} is unreadable ({exc})"
    got = file_digest(path)
    if (got["sha256"], str(got["size"])) in accepted:
        return ""
    return (
        f"{path} is damaged: its size or checksum differs from {sidecar.name} (restore it from a "
        f"copy; or, to accept it as it is, delete {sidecar.name})"
    )


def check_file(path: str | os.PathLike[str]) -> None:
    """Raise CheckpointError when ``path`` does not match its checksum sidecar."""
    problem = verify_file(path)
    if problem:
        raise CheckpointError(problem)


def write_json_verified(path: str | os.PathLike[str], data: Any) -> None:
    """:func:`write_json` with a checksum sidecar (run files read back later)."""

    def write(fh: IO[Any]) -> None:
        json.dump(data, fh, indent=2, sort_keys=True, allow_nan=False, default=str)
        fh.write("\n")

    write_verified(path, write, "w")


def save_checkpoint_verified(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """:func:`save_checkpoint` plus a ``.sha256`` sidecar that :func:`load_checkpoint` checks,
    for single files outside a generation (``best.pt``)."""
    import torch

    write_verified(path, lambda fh: torch.save(payload, fh))


_ARRAY = "__ndarray__"


def to_plain(obj: Any) -> Any:
    """``obj`` with every numpy array and scalar turned into values a checkpoint may hold
    (``torch.load(weights_only=True)`` accepts no numpy objects); :func:`from_plain` undoes it.
    Dicts, lists, tuples, tensors, numbers, strings and bytes pass through."""
    import numpy as np

    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biufc":
            raise TypeError(f"cannot checkpoint an array of dtype {obj.dtype}")
        import torch

        raw = np.frombuffer(np.ascontiguousarray(obj).tobytes(), dtype=np.uint8)
        return {_ARRAY: torch.from_numpy(raw.copy()), "dtype": obj.dtype.str,
                "shape": tuple(int(n) for n in obj.shape)}  # fmt: skip
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict) or (hasattr(obj, "items") and hasattr(obj, "keys")):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(to_plain(v) for v in obj)
    return obj


def from_plain(obj: Any) -> Any:
    """Undo :func:`to_plain` (arrays come back writeable, with their dtype and shape)."""
    import numpy as np

    if isinstance(obj, dict):
        if _ARRAY in obj:
            dtype = np.dtype(str(obj["dtype"]))
            if dtype.kind not in "biufc":
                raise CheckpointError(f"a checkpoint array has dtype {dtype}, which is refused")
            shape = tuple(int(n) for n in obj["shape"])
            raw = obj[_ARRAY]
            data = raw.numpy().tobytes() if hasattr(raw, "numpy") else bytes(raw)
            try:
                return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
            except ValueError as exc:
                raise CheckpointError(f"a checkpoint array does not fit its shape: {exc}") from exc
        return {k: from_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(from_plain(v) for v in obj)
    return obj


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` without executing code from it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; was the run started with checkpoints on?")
    check_file(path)
    return _read_checkpoint(path, map_location)


def _read_checkpoint(path: Path, map_location: Any = "cpu") -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of ``path`` (tensors and plain containers only: no code
    from the file runs); anything else is a CheckpointError naming the file. torch's own advice
    (to load with ``weights_only=False``, which would run code from the file) is not passed on."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols, not the user's
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"{path} is not an rlblocks checkpoint: {_load_failure(exc)}. Loading never runs "
            "code from a file, so only tensors and plain containers are read; restore the file "
            "from a copy, or pass a checkpoint rlblocks wrote (RUN_DIR/checkpoints/best.pt, or a "
            "generation's latest.pt)"
        ) from exc
    if not isinstance(payload, dict):
        raise CheckpointError(
            f"{path} is not an rlblocks checkpoint: it holds a {type(payload).__name__}, not "
            "the dict of weights and state that rlblocks writes"
        )
    return payload


def _load_failure(exc: BaseException) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in a few words. torch's own message
    is not passed on: it advises loading the file with ``weights_only=False``, which would run
    code from it."""
    import re

    text = str(exc)
    refused = re.search(r"Unsupported global: (?:GLOBAL )?([\w.]+)", text)
    if refused:
        return f"it holds {refused.group(1)} objects, which are refused"
    if "zip archive" in text or "PytorchStreamReader" in text:
        return "its archive is cut short or damaged"
    if "Weights only load failed" in text:
        return "it holds objects other than tensors and plain containers"
    return "it does not read as a torch file (damaged, or written by another program)"


# -- generations: one checkpoint = several files committed together ---------------------------

#: a generation's trainer checkpoint: the policy, the trainer's counters, the random streams
TRAINER_FILE = "latest.pt"
#: the manifest's counters, which its trainer checkpoint records too
COUNTERS = ("env_step", "gradient_step")

CURRENT = "CURRENT"
MANIFEST = "MANIFEST.json"
#: the manifest's key for the SHA-256 of its other entries (so a flipped counter is caught too)
MANIFEST_DIGEST = "manifest_sha256"
#: generations kept on disk: the current one and the one before it (the fallback)
KEEP_GENERATIONS = 2


def file_digest(path: Path) -> dict[str, Any]:
    """Size and SHA-256 of a file, read in 1 MiB blocks."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return {"size": path.stat().st_size, "sha256": h.hexdigest()}


def _manifest_digest(manifest: dict[str, Any]) -> str:
    import hashlib

    body = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class GenerationStore:
    """Checkpoints as numbered generations under ``root`` (a run's ``checkpoints/``).

    A generation is a directory ``gen-00000042/`` holding its files (the trainer state
    ``latest.pt``, the replay buffer ``buffer.h5``, ...) and ``MANIFEST.json`` with every file's
    size and SHA-256. It is written under a temporary name, renamed into place, and committed by
    atomically replacing the one-line file ``CURRENT`` with its name: a crash at any moment
    leaves the previous generation current and whole. Loading verifies the manifest and falls
    back to the newest older generation that verifies, with a warning. The current generation
    and the one before it are kept; older ones and leftover temporaries are removed.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # -- writing ------------------------------------------------------------------------------
    def generations(self) -> list[Path]:
        """Finished generation directories, newest first."""
        if not self.root.is_dir():
            return []
        gens = [p for p in self.root.glob("gen-*") if p.is_dir() and p.name[4:].isdigit()]
        return sorted(gens, key=lambda p: int(p.name[4:]), reverse=True)

    def commit(self, write: Callable[[Path], dict[str, Any]]) -> Path:
        """Write a new generation: ``write(tmp_dir)`` puts its files into ``tmp_dir`` and
        returns extra manifest entries (counters); then checksums, rename, commit, prune."""
        import uuid

        with writing(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
        gens = self.generations()
        number = int(gens[0].name[4:]) + 1 if gens else 1
        name = f"gen-{number:08d}"
        tmp = self.root / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        with writing(self.root / name):
            tmp.mkdir()
        try:
            with writing(self.root / name):
                extra = write(tmp) or {}
            files = {
                p.name: file_digest(p) for p in sorted(tmp.iterdir()) if p.is_file()
            }
            for p in tmp.iterdir():
                with contextlib.suppress(OSError), open(p, "rb+") as fh:
                    os.fsync(fh.fileno())
            manifest = {"generation": number, "files": files, **extra}
            manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)
            with writing(tmp / MANIFEST), open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
                json.dump(manifest, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            _fsync_dir(tmp)
            final = self.root / name
            with writing(final):
                os.replace(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
            raise
        with atomic_write(self.root / CURRENT, "w") as fh:  # the commit point
            fh.write(name + "\n")
        self.prune()
        return final

    def prune(self) -> None:
        """Remove generations older than the newest ``KEEP_GENERATIONS`` whole ones (the current
        one always stays), and stale temporaries. A damaged generation does not count as a
        fallback: after a resume that skipped one, the good generation it fell back to stays
        and the damaged one goes once enough whole ones are newer than it."""
        import shutil

        current = self._current_name()
        whole_newer = 0
        for gen in self.generations():
            if gen.name != current and whole_newer >= KEEP_GENERATIONS:
                # renamed out of the way first, so a kill mid-delete leaves no half generation
                doomed = self.root / f".{gen.name}.old.tmp"
                try:
                    os.replace(gen, doomed)
                except OSError:
                    continue
                shutil.rmtree(doomed, ignore_errors=True)
            elif self._looks_whole(gen):
                whole_newer += 1
        for tmp in self.root.glob(".gen-*.tmp"):
            shutil.rmtree(tmp, ignore_errors=True)

    def _looks_whole(self, gen: Path) -> bool:
        """A quick :meth:`verify` for pruning: the manifest reads and every file it lists is
        there at its size (no checksums: pruning follows every save, buffers can be large)."""
        try:
            manifest = json.loads((gen / MANIFEST).read_text(encoding="utf-8"))
            files = manifest["files"]
            return all((gen / name).stat().st_size == want.get("size")
                       for name, want in files.items())  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False

    # -- reading ------------------------------------------------------------------------------
    def _current_name(self) -> str | None:
        try:
            return (self.root / CURRENT).read_text(encoding="utf-8").strip() or None
        except (OSError, UnicodeDecodeError):  # a damaged CURRENT: the newest whole one is used
            return None

    def verify(self, gen: Path) -> str:
        """Empty when ``gen`` is whole; else what is wrong with it."""
        try:
            manifest = json.loads((gen / MANIFEST).read_text(encoding="utf-8"))
            files = manifest["files"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return f"{gen.name}: no readable manifest ({exc})"
        # manifests of rlblocks 0.2 hold their own digest (older ones have none to check)
        if MANIFEST_DIGEST in manifest and manifest[MANIFEST_DIGEST] != _manifest_digest(manifest):
            return f"{gen.name}/{MANIFEST} is damaged (its own checksum differs)"
        for name, want in files.items():
            path = gen / name
            if not path.is_file():
                return f"{gen.name}/{name} is missing"
            got = file_digest(path)
            if got["size"] != want.get("size") or got["sha256"] != want.get("sha256"):
                return f"{gen.name}/{name} is damaged (size or checksum differs from the manifest)"
        if TRAINER_FILE in files:
            return _trainer_checkpoint_problem(gen, manifest)
        return ""

    def candidates(self) -> list[Path]:
        """Generations in the order loading tries them: ``CURRENT``'s first, then newest first
        (a generation renamed into place but never committed comes after the current one)."""
        order = self.generations()
        current = self._current_name()
        if current is not None:
            order.sort(key=lambda p: (p.name != current, -int(p.name[4:])))
        return order

    def latest_good(self, warn: Callable[[str], None] | None = None) -> Path | None:
        """The newest generation that verifies, starting from ``CURRENT``; each one skipped is
        reported through ``warn``. None when there is no generation at all."""
        order = self.candidates()
        problems = []
        for gen in order:
            problem = self.verify(gen)
            if not problem:
                if problems and warn is not None:
                    warn(f"checkpoint {'; '.join(problems)}; using {gen.name} instead")
                return gen
            problems.append(problem)
        if problems:
            raise CheckpointError(f"no intact checkpoint in {self.root}: {'; '.join(problems)}")
        return None

    def manifest(self, gen: Path) -> dict[str, Any]:
        return json.loads((gen / MANIFEST).read_text(encoding="utf-8"))


def checkpoint_content_problem(path: Path, payload: dict[str, Any]) -> str:
    """Empty when the checkpoint ``payload`` read from ``path`` holds policy weights (all that
    ``load`` takes from it); else what is wrong, in the words of the reader that refuses it."""
    if not isinstance(payload.get("policy"), dict):
        return f"{path} is damaged: it holds no policy weights; restore it from a copy"
    return ""


def _trainer_checkpoint_problem(gen: Path, manifest: dict[str, Any]) -> str:
    """Empty when ``gen``'s trainer checkpoint reads as resuming reads it (weights only, no code
    from it) and agrees with the manifest's counters; else what is wrong. A checksum vouches
    only for what the manifest lists, and a manifest can be rewritten with its file: this is
    what a rewritten pair cannot pass unless it is a checkpoint that fits its counters."""
    path = gen / TRAINER_FILE
    try:
        payload = _read_checkpoint(path)
    except CheckpointError as exc:
        return str(exc)  # names the file and what it is not
    if problem := checkpoint_content_problem(path, payload):
        return problem
    trainer = payload.get("trainer")
    if not isinstance(trainer, dict):
        return f"{path} is damaged: it holds no trainer state; restore it from a copy"
    for key in COUNTERS:
        if key in manifest and trainer.get(key) != manifest[key]:
            return (
                f"{gen.name}/{MANIFEST} says {key}={manifest[key]!r} and {TRAINER_FILE} "
                f"{trainer.get(key)!r}: one of them was changed, so the generation is damaged"
            )
    return ""


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path:
    """The trainer checkpoint (``latest.pt``) of a run's newest intact generation (or of the
    single-file layout of rlblocks 0.1)."""
    root = Path(run_dir) / "checkpoints"
    gen = GenerationStore(root).latest_good(warn=_warn)
    if gen is not None:
        return gen / "latest.pt"
    legacy = root / "latest.pt"
    if legacy.is_file():
        return legacy
    raise CheckpointError(f"{run_dir} has no checkpoint yet")


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=3)
