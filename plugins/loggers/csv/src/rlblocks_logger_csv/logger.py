"""CSV logger: ``<namespace>.csv`` with a ``step`` column and one column per scalar."""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from rlblocks.contracts import ConfigError
from rlblocks.plugins import hookimpl
from rlblocks_logger_csv._spec import CsvConfig


class CsvLogger:
    """Appends rows to one CSV per namespace; widens a file's header when a new key appears."""

    def __init__(self, log_dir: str | Path, config: CsvConfig | None = None) -> None:
        self.config = config or CsvConfig()
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._columns: dict[str, list[str]] = {}
        self._files: dict[str, IO[str]] = {}
        self._jsonl: IO[str] | None = None
        for path in self.log_dir.glob("*.csv"):  # a resumed run appends to what is there
            if path.is_symlink():  # never read through one; writing it is refused (_open_own)
                continue
            header = next(csv.reader(io.StringIO(_read_text(path))), None)
            if header:
                self._columns[path.stem] = header

    def where(self) -> str:
        """Where the data is, for the run's summary: one CSV per namespace (and metrics.jsonl)."""
        extra = " and metrics.jsonl" if self.config.jsonl else ""
        return f"{self.log_dir / '*.csv'}{extra}"

    def _file(self, namespace: str, keys: list[str]) -> tuple[IO[str], list[str]]:
        columns = self._columns.get(namespace)
        path = self.log_dir / f"{namespace}.csv"
        if columns is None:
            columns = ["step", *keys]
            fh = _open_own(path, "w")
            csv.writer(fh).writerow(columns)
        elif any(k not in columns for k in keys):
            fh = self._widen(namespace, path, columns + [k for k in keys if k not in columns])
            columns = self._columns[namespace]
        else:
            fh = self._files.get(namespace) or _open_own(path, "a")
        self._columns[namespace] = columns
        self._files[namespace] = fh
        return fh, columns

    def _widen(self, namespace: str, path: Path, columns: list[str]) -> IO[str]:
        old = self._files.pop(namespace, None)
        if old is not None:
            old.close()
        rows = []
        if path.exists():
            rows = list(csv.DictReader(io.StringIO(_read_text(path))))
        # the widened file replaces the old one whole (a crash leaves one or the other); the
        # temporary file is opened without following a link either
        tmp = path.with_name(f".{path.name}.tmp")
        with _open_own(tmp, "w") as out:
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        self._columns[namespace] = columns
        return _open_own(path, "a")

    @hookimpl
    def rlblocks_log(self, namespace: str, scalars: Mapping[str, float], step: int) -> None:
        keys = list(scalars)
        fh, columns = self._file(namespace, keys)
        row = {"step": step, **{k: _fmt(v) for k, v in scalars.items()}}
        csv.DictWriter(fh, fieldnames=columns).writerow(row)
        if self.config.jsonl:
            if self._jsonl is None:
                self._jsonl = _open_own(self.log_dir / "metrics.jsonl", "a")
            record = {"namespace": namespace, "step": step}
            record.update({k: _fmt(v) for k, v in scalars.items()})
            self._jsonl.write(json.dumps(record) + "\n")

    @hookimpl
    def rlblocks_test_end(self, stats: Mapping[str, Any], env_step: int) -> None:
        self.flush()

    @hookimpl
    def rlblocks_run_end(self, result: Mapping[str, Any], run_dir: Path | None) -> None:
        self.close()

    @hookimpl
    def rlblocks_exception(self, exc: BaseException, where: str) -> None:
        self.close()

    def flush(self) -> None:
        for fh in self._files.values():
            fh.flush()
        if self._jsonl is not None:
            self._jsonl.flush()

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None


def _open_own(path: Path, mode: str) -> IO[str]:
    """``path`` opened for writing (``"w"``) or appending (``"a"``) as text, never through a
    symbolic link: one in its place is refused (naming it), and what it points to is left
    alone."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if mode == "w" else os.O_APPEND)
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        if path.is_symlink():
            raise ConfigError(
                f"{path} is a symbolic link; the csv logger never writes through one (it could "
                "send the log anywhere): delete it (its target is left alone)"
            ) from None
        raise
    return os.fdopen(fd, mode, newline="" if path.suffix == ".csv" else None)


def _read_text(path: Path) -> str:
    """A log file's text for the csv reader. Lines a crash or a bad disk left damaged (bytes
    that are not UTF-8, NUL bytes) are kept with those bytes replaced, and a warning names the
    file: a resumed run goes on logging, and nothing it logged before is dropped."""
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    damaged = "\ufffd" in text and "\ufffd" not in raw.decode("utf-8", errors="ignore")
    if "\0" in text:
        text, damaged = text.replace("\0", ""), True
    if damaged:
        warnings.warn(
            f"{path} has damaged lines (bytes that are not UTF-8 text); they are kept with those "
            "bytes replaced, and logging goes on",
            stacklevel=3,
        )
    return text


def _fmt(value: float) -> float | int | None:
    """A cell: counts (ints: env steps, episodes, gradient steps) as integers, measurements as
    floats (a mean return of exactly 10 stays ``10.0``); NaN and infinities as empty cells (null
    in JSON lines)."""
    if isinstance(value, numbers.Integral):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else None
