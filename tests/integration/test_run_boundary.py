"""The trust boundary of a run directory beyond imports: what its config.json names outside the
run (a memory-mapped buffer's folder, a logger's server) is written or contacted only by a
resume the user gives it to again or trusts, never by load, eval, describe, plot or verify; a run
writes through no symbolic link inside its directory; and ``rlblocks verify`` refuses what resume
refuses (a rewritten checkpoint under a recomputed manifest, a manifest whose counters changed)."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rlblocks
from rlblocks.cli import main as cli
from rlblocks.contracts import BufferFileError, CheckpointError, ConfigError
from rlblocks.run import build_config, spec_lookup, verify_run
from rlblocks.run._trust import check_run_imports, check_run_reach

MORE = ["trainer.max_env_steps=400"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("boundary") / "run"
    rlblocks.train(
        "dqn", env="CartPole-v1", seed=0, run_dir=run, loggers=["csv"], progress=False,
        max_env_steps=200, stop_reward=1e9, quiet=True,
        overrides=["trainer.warmup_steps=100", "trainer.test_episodes=1"],
    )  # fmt: skip
    return run


def _copy(run: Path, tmp: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """A copy of ``run``; ``edit`` changes its config.json as whoever crafted it would."""
    copy = tmp / f"run-{uuid.uuid4().hex[:6]}"
    shutil.copytree(run, copy)
    if edit is not None:
        config = json.loads((copy / "config.json").read_text())
        edit(config)
        (copy / "config.json").write_text(json.dumps(config))
        (copy / "config.json.sha256").unlink()
    return copy


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry below ``folder`` with its size, modification time and (files) content."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
        out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, data)
    return out


def _read_everything(run: Path, tmp: Path) -> None:
    """What a user does with a run directory short of resuming it; each must succeed, but
    verify, which checks what resume would refuse, exits 1 unless the run is trusted (the
    callers check the setting it names)."""
    agent = rlblocks.load(run)
    assert agent.algo == "dqn"
    assert cli(["eval", str(run), "--episodes", "1"]) == 0
    assert cli(["eval", str(run), "--episodes", "1", "--which", "latest"]) == 0
    assert cli(["describe", str(run)]) == 0
    assert cli(["plot", str(run), "-o", str(tmp / f"{run.name}.png")]) == 0
    assert cli(["verify", str(run), "--trust-imports"]) == 0
    assert cli(["verify", str(run)]) == 1


# -- files outside the run ----------------------------------------------------------------------


def test_a_memmap_folder_outside_the_run_is_written_only_when_the_user_gives_it(
    finished_run: Path, tmp_path: Path, capsys
) -> None:
    outside = tmp_path / "outside"
    run = _copy(finished_run, tmp_path,
                lambda c: c["buffer"].update(storage="memmap", path=str(outside)))  # fmt: skip
    before = _snapshot(run)
    capsys.readouterr()
    _read_everything(run, tmp_path)
    assert f"refused: buffer.path: '{outside}' is outside the run directory" in (
        capsys.readouterr().out
    )
    assert _snapshot(run) == before  # none of them wrote into the run either
    assert cli(["resume", str(run), "--max-env-steps", "400"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: buffer.path: '{outside}' is outside the run directory")
    assert "--set buffer.path=..." in err and "--trust-imports" in err and "\n" not in err
    with pytest.raises(ConfigError, match=r"buffer\.path.*overrides=.*trust_imports=True"):
        rlblocks.resume(run, overrides=MORE)
    assert not outside.exists()
    assert _snapshot(run) == before
    # given again, the folder is the user's word: the buffer's arrays go there
    result = rlblocks.resume(run, overrides=[*MORE, f"buffer.path={outside}"])
    assert result.env_steps >= 400
    assert any(p.name.startswith("data.") for p in outside.iterdir())


def test_a_memmap_folder_inside_the_run_needs_no_word(finished_run: Path, tmp_path: Path) -> None:
    run = _copy(finished_run, tmp_path)
    config = json.loads((run / "config.json").read_text())
    config["buffer"].update(storage="memmap", path=str(run / "mine"))
    resolved = build_config("dqn", file_data=config, spec_lookup=spec_lookup)
    check_run_reach(resolved, run, trusted=False)  # no error
    (run / "elsewhere").mkdir()
    (run / "mine").symlink_to(run / "elsewhere")  # inside by name, but through a link
    with pytest.raises(ConfigError, match=r"buffer\.path: .* reaches through the symbolic link"):
        check_run_reach(resolved, run, trusted=False)


# -- endpoints ----------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that answers every request with an error and records its path."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.path)
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PATCH = do_PUT = _answer

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_logger_server_the_run_names_is_contacted_only_when_the_user_gives_it(
    finished_run: Path, tmp_path: Path, server, monkeypatch, capsys
) -> None:
    url, seen = server
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = _copy(finished_run, tmp_path, lambda c: c["run"].update(
        loggers=["csv", "mlflow"], logger_options={"mlflow": {"tracking_uri": url}},
    ))  # fmt: skip
    capsys.readouterr()
    _read_everything(run, tmp_path)
    assert f"refused: run.logger_options.mlflow.tracking_uri: {url!r}" in capsys.readouterr().out
    assert cli(["resume", str(run), "--max-env-steps", "400"]) == 2
    err = capsys.readouterr().err
    field = "run.logger_options.mlflow.tracking_uri"
    assert f"{field}: '{url}' comes from the run's config.json" in err
    assert "--set run.logger_options.mlflow.tracking_uri=..." in err and "--trust-imports" in err
    with pytest.raises(ConfigError, match=r"tracking_uri.*trust_imports=True"):
        rlblocks.resume(run, overrides=MORE)
    assert seen == []  # nothing above contacted it
    # given again (here as a whole table), it is the user's server: the resumed run reports there
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    again = f'run.logger_options={{"mlflow": {{"tracking_uri": "{url}"}}}}'
    with pytest.raises(Exception):  # noqa: B017 - the stand-in server answers only errors
        rlblocks.resume(run, overrides=[*MORE, again])
    assert seen


def _resolved(**sections: dict[str, Any]) -> Any:
    return build_config("dqn", file_data=sections, spec_lookup=spec_lookup)


@pytest.mark.parametrize(
    ("sections", "field", "value"),
    [
        ({"run": {"loggers": ["wandb"], "logger_options": {"wandb": {"entity": "them"}}}},
         "run.logger_options.wandb.entity", "them"),
        ({"run": {"loggers": ["wandb"], "logger_options": {"wandb": {"mode": "online"}}}},
         "run.logger_options.wandb.mode", "online"),
        ({"env": {"backend": "ray", "address": "ray://10.0.0.5:10001"}}, "env.address",
         "ray://10.0.0.5:10001"),
        ({"env": {"backend": "ray", "init_kwargs": {"runtime_env": {"pip": ["x"]}}}},
         "env.init_kwargs", {"runtime_env": {"pip": ["x"]}}),
    ],
)  # fmt: skip
def test_every_declared_endpoint_needs_the_users_word(
    sections: dict[str, Any], field: str, value: Any, tmp_path: Path
) -> None:
    resolved = _resolved(**sections)
    with pytest.raises(ConfigError, match=rf"^{field}: .* comes from the run's config\.json"):
        check_run_reach(resolved, tmp_path, trusted=False)
    check_run_reach(resolved, tmp_path, trusted=True)
    given = (tuple(field.split(".")), value)
    check_run_reach(resolved, tmp_path, trusted=False, overrides=[given])
    # another field given is not this one
    other = (("run", "seed"), 3)
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        check_run_reach(resolved, tmp_path, trusted=False, overrides=[other])


def test_a_loggers_folder_outside_the_run_needs_the_users_word(tmp_path: Path) -> None:
    options = {"wandb": {"dir": str(tmp_path / "x")}}
    resolved = _resolved(run={"loggers": ["wandb"], "logger_options": options})
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"run\.logger_options\.wandb\.dir: .* is outside"):
        check_run_reach(resolved, run, trusted=False)
    given = f"run.logger_options.wandb.dir={tmp_path / 'x'}"
    check_run_reach(resolved, run, trusted=False, overrides=[given])
    # a default left alone names nothing: the user's own environment decides
    check_run_reach(_resolved(run={"loggers": ["wandb", "mlflow"]}), run, trusted=False)


# -- symbolic links inside a run directory ------------------------------------------------------


def _plant(run: Path, name: str, outside: Path) -> None:
    """Move ``run/name`` to ``outside`` and leave a symbolic link to it in its place."""
    entry = run / name
    if entry.exists():
        shutil.move(str(entry), str(outside))
    elif name.endswith("/"):
        outside.mkdir()
    else:
        outside.write_text("precious\n")
    entry = run / name.rstrip("/")
    entry.symlink_to(outside)


@pytest.mark.parametrize(
    "name",
    [".lock", "logs", "logs/train.csv", "checkpoints", "checkpoints/best.pt",
     "checkpoints/CURRENT", "tests.csv", "result.json", "buffer/"],
)  # fmt: skip
def test_a_symbolic_link_among_the_runs_entries_is_refused_and_its_target_untouched(
    finished_run: Path, tmp_path: Path, name: str
) -> None:
    run = _copy(finished_run, tmp_path)
    outside = tmp_path / f"outside-{name.strip('/').replace('/', '-')}"
    _plant(run, name, outside)
    before = _snapshot(outside) if outside.is_dir() else outside.read_bytes()
    with pytest.raises(ConfigError, match=rf"{name.rstrip('/')} is (a symbolic link|not a plain)"):
        rlblocks.resume(run, overrides=MORE)
    after = _snapshot(outside) if outside.is_dir() else outside.read_bytes()
    assert after == before
    assert (run / name.rstrip("/")).is_symlink()  # left as it was


def test_a_symbolic_replaced_run_is_refused_by_overwrite_and_its_target_untouched(
    finished_run: Path, tmp_path: Path
) -> None:
    run = _copy(finished_run, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    before = _snapshot(outside)
    (run / ".replaced-run").symlink_to(outside)
    kept = _snapshot(run)
    with pytest.raises(ConfigError, match=r"\.replaced-run is a symbolic link"):
        rlblocks.train(
            "dqn", env="CartPole-v1", run_dir=run, overwrite=True, loggers=[], quiet=True,
            max_env_steps=200, overrides=["trainer.warmup_steps=100"],
        )  # fmt: skip
    assert _snapshot(outside) == before
    kept.pop(".lock")  # (the refusing start held the directory's lock: it wrote its pid)
    assert {k: v for k, v in _snapshot(run).items() if k != ".lock"} == kept
    # the run it would replace is there as it was


def test_a_hard_linked_lock_is_refused_and_its_other_name_untouched(
    finished_run: Path, tmp_path: Path
) -> None:
    run = _copy(finished_run, tmp_path)
    other = tmp_path / "notes.txt"
    other.write_text("precious\n")
    (run / ".lock").unlink()
    (run / ".lock").hardlink_to(other)
    with pytest.raises(ConfigError, match=r"\.lock is not a plain file"):
        rlblocks.resume(run, overrides=MORE)
    assert other.read_text() == "precious\n"


def test_the_csv_logger_never_appends_through_a_symbolic_link(tmp_path: Path) -> None:
    from rlblocks_logger_csv.logger import CsvLogger

    target = tmp_path / "bashrc"
    target.write_text("precious\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.csv").symlink_to(target)
    logger = CsvLogger(logs)
    with pytest.raises(ConfigError, match=r"train\.csv is a symbolic link"):
        logger.rlblocks_log("train", {"x": 1.0}, 1)
    (logs / "metrics.jsonl").symlink_to(target)
    with pytest.raises(ConfigError, match=r"metrics\.jsonl is a symbolic link"):
        logger.rlblocks_log("test", {"x": 1.0}, 1)
    logger.close()
    assert target.read_text() == "precious\n"


def _step(t: int) -> dict[str, Any]:
    import numpy as np

    return {"obs": np.full((2, 3), t, np.float32), "act": np.array([0, 1]), "rew": np.ones(2),
            "terminated": np.zeros(2, bool), "truncated": np.zeros(2, bool),
            "obs_next": np.full((2, 3), t + 1, np.float32)}  # fmt: skip


def test_memmap_buffer_files_are_never_written_through_a_symbolic_link(tmp_path: Path) -> None:
    target = tmp_path / "precious.bin"
    target.write_bytes(b"precious" * 100)
    folder = tmp_path / "buf"
    folder.mkdir()
    for name in ("data.obs.npy", "data.act.npy", "buffer.state.npz.tmp"):
        (folder / name).symlink_to(target)
    buf = rlblocks.make_buffer("replay", 8, 2, storage="memmap", path=str(folder))
    for t in range(3):
        buf.add(_step(t))
    buf.flush()
    assert target.read_bytes() == b"precious" * 100
    assert not (folder / "data.obs.npy").is_symlink()  # the link was replaced, not followed
    # a flushed buffer whose array file became a link is refused when reopened
    (folder / "data.obs.npy").unlink()
    (folder / "data.obs.npy").symlink_to(folder / "data.act.npy")
    with pytest.raises(BufferFileError, match=r"data\.obs\.npy is a symbolic link"):
        rlblocks.make_buffer("replay", 8, 2, storage="memmap", path=str(folder))
    assert target.read_bytes() == b"precious" * 100


# -- verify checks what resume checks -----------------------------------------------------------


def _rewrite_manifest(gen: Path, change: Callable[[dict[str, Any]], None]) -> None:
    from rlblocks.run._checkpoint import MANIFEST, MANIFEST_DIGEST, _manifest_digest

    manifest = json.loads((gen / MANIFEST).read_text())
    change(manifest)
    if MANIFEST_DIGEST in manifest:
        manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)
    (gen / MANIFEST).write_text(json.dumps(manifest))


def _repickled(gen: Path) -> None:
    """``latest.pt`` saved again with an object no weights-only load accepts, and the manifest
    recomputed for it, as whoever crafted it would."""
    import argparse

    import torch

    from rlblocks.run._checkpoint import file_digest

    payload = torch.load(gen / "latest.pt", weights_only=False)
    payload["extra"] = argparse.Namespace(x=1)
    torch.save(payload, gen / "latest.pt")
    digest = file_digest(gen / "latest.pt")
    _rewrite_manifest(gen, lambda m: m["files"].update({"latest.pt": digest}))


def _counter_changed(gen: Path) -> None:
    """The manifest's own digest removed and its env step changed."""
    from rlblocks.run._checkpoint import MANIFEST_DIGEST

    _rewrite_manifest(gen, lambda m: (m.pop(MANIFEST_DIGEST), m.update(env_step=150)))


@pytest.mark.parametrize(
    ("tamper", "said"),
    [(_repickled, "argparse.Namespace objects, which are refused"),
     (_counter_changed, "MANIFEST.json says env_step=150 and latest.pt 200")],
)  # fmt: skip
def test_verify_refuses_the_generations_resume_refuses(
    finished_run: Path, tmp_path: Path, tamper, said: str, capsys
) -> None:
    run = _copy(finished_run, tmp_path)
    (gen,) = (run / "checkpoints").glob("gen-*")
    tamper(gen)
    problems = verify_run(run)
    assert len(problems) == 1 and said in problems[0]
    assert cli(["verify", str(run)]) == 1
    assert said in capsys.readouterr().out
    for reader in (lambda: rlblocks.resume(run, overrides=MORE),
                   lambda: rlblocks.load(run, which="latest")):  # fmt: skip
        with pytest.raises(CheckpointError, match=rf"no intact checkpoint.*{said}"):
            reader()


def test_verify_reads_the_config_as_resume_does(finished_run: Path, tmp_path: Path) -> None:
    run = _copy(finished_run, tmp_path, lambda c: c["trainer"].update(batch_size=-1))
    with pytest.raises(ConfigError, match=r"batch_size"):
        rlblocks.resume(run, overrides=MORE)
    (problem,) = verify_run(run)
    assert "config.json does not read as a run's config" in problem and "batch_size" in problem


def test_a_wrapper_told_where_to_write_needs_trust_even_from_gymnasium(
    finished_run: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "videos"
    record = {"path": "gymnasium.wrappers:RecordVideo", "kwargs": {"video_folder": str(folder)}}
    run = _copy(finished_run, tmp_path, lambda c: c["env"].update(wrappers=[record]))
    for attempt in (lambda: rlblocks.load(run), lambda: rlblocks.resume(run, overrides=MORE)):
        with pytest.raises(ConfigError, match=r"env\.wrappers: .*RecordVideo.* takes "
                           r"video_folder=.*trust_imports=True"):  # fmt: skip
            attempt()
    assert cli(["eval", str(run), "--episodes", "1"]) == 2
    assert not folder.exists()
    # keyword arguments that name no file pass, as before
    clip = {"path": "gymnasium.wrappers:ClipReward", "kwargs": {"min_reward": -1, "max_reward": 1}}
    config = json.loads((finished_run / "config.json").read_text())
    config["env"]["wrappers"] = [clip]
    check_run_imports(build_config("dqn", file_data=config, spec_lookup=spec_lookup), False)
