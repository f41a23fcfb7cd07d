"""Which Ray this process uses, and whether the backend may shut it down.

Several vector envs of one process share one Ray (a training run builds a train and a test
vector env). When none is running the first one starts a local Ray; the last one to close shuts
it down. A Ray that was already initialised, or a cluster given by address, is never shut down
here: it belongs to whoever started it.

A Ray started here also stops when this process exits without closing its vector envs: at
interpreter exit (Ctrl-C included), and on SIGTERM, which would otherwise end the process
without running exit handlers. When the process is killed outright (SIGKILL), the env actors
die with their owner (this process) and Ray's own processes wind down by themselves.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import signal
import socket
import threading
from typing import Any

import ray

from rlblocks.contracts import ConfigError

#: ``ray.init`` arguments that only make sense when starting a Ray, not when connecting to one.
START_ONLY = frozenset({
    "num_cpus", "num_gpus", "resources", "labels", "object_store_memory", "include_dashboard",
    "dashboard_host", "dashboard_port", "_memory", "_system_config", "_temp_dir",
    "_plasma_directory",
})

_lock = threading.Lock()
_owned = False  # the Ray this process is connected to was started here
_users = 0  # open vector envs relying on that owned Ray
_exit_hooks = False  # the atexit / SIGTERM hooks are installed
#: (the address this module connected to Ray with, the head's address Ray reported then)
_connected_as: tuple[str, str] | None = None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def acquire(address: str | None, init_kwargs: dict[str, Any]) -> bool:
    """Make sure this process is connected to Ray; True when the caller must ``release()``.

    ``address`` None: keep the Ray already initialised here, else connect to the local Ray
    that ``ray start`` runs on this machine (or ``RAY_ADDRESS``), else start a private one. A
    string: connect to that cluster.
    """
    global _owned, _users, _connected_as
    with _lock:
        if ray.is_initialized():
            _check_same_cluster(address)
            if _owned:
                _users += 1
            return _owned
        connect_kwargs = {k: v for k, v in init_kwargs.items() if k not in START_ONLY}
        if address is not None:
            try:
                ray.init(address=address, **connect_kwargs)
            except ConnectionError as exc:
                raise ConfigError(
                    f"cannot connect to the Ray cluster at address={address!r}: {exc}. Check "
                    "that the cluster is up (`ray status`) and, if it uses token "
                    "authentication (Ray's default), that this process has its token "
                    "(RAY_AUTH_TOKEN or ~/.ray/auth_token); or pass address=None to start a "
                    "local Ray"
                ) from exc
            _connected_as = (address, ray.get_runtime_context().gcs_address)
            return False
        running = _running_local_address(init_kwargs.get("_temp_dir"))
        if running is not None:
            ray.init(address=running, **connect_kwargs)
            return False
        start_kwargs = {"num_cpus": _cores(), "include_dashboard": False, **init_kwargs}
        ray.init(**start_kwargs)
        _owned, _users = True, 1
        _install_exit_hooks()
        return True


def release() -> None:
    """One vector env that ``acquire`` counted is done; shut the owned Ray down after the last."""
    global _owned, _users
    with _lock:
        _users = max(0, _users - 1)
        if _users == 0 and _owned:
            _owned = False
            if ray.is_initialized():
                ray.shutdown()


def _install_exit_hooks() -> None:
    """Shut the owned Ray down at exit; make SIGTERM exit through the exit handlers, unless
    someone (Ray itself, the user) already handles it."""
    global _exit_hooks
    if _exit_hooks:
        return
    _exit_hooks = True
    atexit.register(_shutdown_owned)
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _shutdown_owned() -> None:
    """At exit: stop the Ray this backend started, whoever still uses it."""
    global _owned, _users
    with _lock:
        if _owned:
            _owned, _users = False, 0
            if ray.is_initialized():
                ray.shutdown()


def started_here() -> bool:
    """Whether the Ray this process uses was started by this backend."""
    return _owned and ray.is_initialized()


def _running_local_address(temp_dir: str | None) -> str | None:
    """``RAY_ADDRESS``, else the cluster ``ray start`` recorded on this machine: Ray's own rule
    for ``ray.init()`` without an address. Unlike ``address="auto"``, it never picks the private
    Ray another process started with ``ray.init()``, which dies with that process."""
    env = os.environ.get("RAY_ADDRESS")
    if env:
        return env
    try:
        from ray._private.services import find_bootstrap_address  # Ray's lookup, not public
    except ImportError:  # pragma: no cover - a Ray that moved it: start a private one
        return None
    try:
        return find_bootstrap_address(temp_dir)
    except Exception:
        return None


def _host_port(address: str) -> tuple[str, str]:
    host, _, port = address.rpartition(":")
    return host.strip("[]").lower(), port


def _is_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine: a loopback address, or an address this machine can
    bind a socket to (each of its own interfaces)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip.is_loopback:
            return True
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((sockaddr[0], 0, *sockaddr[2:]))
            return True
        except OSError:
            continue
    return False


def same_address(given: str, reported: str) -> bool:
    """Whether ``host:port`` ``given`` reaches the head that Ray reports as ``reported``: the
    same port, and the same host, or two names of this machine (``127.0.0.1`` for a head that
    Ray reports by this machine's network address)."""
    (host, port), (other, other_port) = _host_port(given), _host_port(reported)
    if port != other_port:
        return False
    return host == other or (_is_this_machine(host) and _is_this_machine(other))


def _check_same_cluster(address: str | None) -> None:
    if address is None or address == "auto" or address.startswith("ray://"):
        return  # a client address cannot be compared with the one Ray reports; trust the user
    current = ray.get_runtime_context().gcs_address
    if _connected_as == (address, current):
        return  # what this process connected with (Ray may report the head by another name)
    if not same_address(address, current):
        raise ConfigError(
            f"this process is already connected to the Ray at {current!r}, not "
            f"address={address!r}. Call ray.shutdown() first, or pass address=None to use the "
            "connected Ray"
        )
