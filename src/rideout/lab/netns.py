"""Build, change and remove a lab on this machine (thin I/O over ``ip``; the plan is
:mod:`rideout.lab.topology`'s, the rules :mod:`rideout.lab.faults`').

What a lab holds is recorded in ``STATE_DIR/<lab id>.json`` (the directory mode 0700,
the file 0600) *before* it is made: the namespaces about to be created, then the cuts
in force. :meth:`Lab.destroy` removes exactly what the file names; :func:`sweep` removes
whatever namespaces carry a lab's prefix (what a lab killed with SIGKILL left behind).

Teardown runs on every exit path of ``with Lab(...)``: an error while building, an
exception in the body, a KeyboardInterrupt (SIGINT), SIGTERM (made SystemExit inside
the ``with`` when nothing else handles it), or a task cancelled by the caller's own
signal handler (as ``rideout up`` does it). Only SIGKILL leaves a lab behind, which
its record or :func:`sweep` removes. Processes started in a
host with :func:`start_in` die with their parent (``PR_SET_PDEATHSIG``), and
:meth:`Lab.destroy` kills whatever still runs in a lab namespace before deleting it.

Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN: namespaces, links,
routes, sysctls): :func:`require_root` refuses clearly without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from rideout._files import replace_atomically
from rideout._json import decode_object
from rideout._process import ManagedProcess
from rideout.lab.errors import LabError
from rideout.lab.faults import Cut, cuts_for, rule_command
from rideout.lab.topology import (
    NETNS_PREFIX,
    Topology,
    intercept_commands,
    netns_prefix,
    plan_topology,
    setup_commands,
    teardown_commands,
)

__all__ = [
    "Lab",
    "Runner",
    "exec_argv",
    "lab_namespaces",
    "require_root",
    "run_command",
    "start_in",
    "state_path",
    "sweep",
]

Runner = Callable[[Sequence[str]], str]
"""Runs one command; its stdout, or LabError (with its stderr) if it failed."""

_STATE_VERSION = 1


def run_command(argv: Sequence[str]) -> str:
    """Run `argv` (an ``ip`` command); its stdout, or LabError naming it and its stderr."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"`{' '.join(argv)}` could not run: {exc}") from None
    if done.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def require_root(euid: Callable[[], int] = os.geteuid) -> None:
    """LabError unless this process runs as root."""
    if euid() != 0:
        raise LabError(
            "the network lab needs root: it creates network namespaces, veth pairs, routes "
            "and sysctls (CAP_SYS_ADMIN and CAP_NET_ADMIN); run it as root (CI does)"
        )


def exec_argv(netns: str) -> list[str]:
    """The argv prefix that runs a command inside namespace `netns`."""
    return ["ip", "netns", "exec", netns]


def lab_namespaces(prefix: str = NETNS_PREFIX, *, runner: Runner = run_command) -> list[str]:
    """The namespaces on this machine whose name starts with `prefix` (every lab's by
    default; ``netns_prefix(id)`` for one lab's)."""
    names = [line.split()[0] for line in runner(["ip", "netns", "list"]).splitlines() if line]
    return sorted(n for n in names if n.startswith(prefix))


def sweep(lab_id: str | None = None, *, runner: Runner = run_command) -> list[str]:
    """Remove every namespace of lab `lab_id` (of every lab if None), killing what runs
    in them first; the namespaces removed."""
    prefix = NETNS_PREFIX if lab_id is None else netns_prefix(lab_id)
    found = lab_namespaces(prefix, runner=runner)
    _remove(found, runner)
    return found


def _remove(namespaces: Sequence[str], runner: Runner) -> list[str]:
    """Kill what runs in each namespace, then delete it; the errors (a missing
    namespace is not one)."""
    errors = []
    present = set(lab_namespaces(runner=runner))
    for command in teardown_commands(namespaces):
        ns = command[-1]
        if ns not in present:
            continue
        with contextlib.suppress(LabError):
            for pid in runner(["ip", "netns", "pids", ns]).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            runner(command)
        except LabError as exc:
            errors.append(str(exc))
    return errors


_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _exit_on_sigterm() -> _SignalHandler:
    """In a plain program (the main thread, SIGTERM at its default, which would end the
    process without running a ``finally``), make SIGTERM raise SystemExit(143) so the
    lab's teardown runs; the handler to restore. Where the caller handles SIGTERM itself
    (an asyncio program's ``add_signal_handler``, as ``rideout up`` does), nothing
    changes: its handler cancels the work, which runs the teardown."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)
    return signal.SIG_DFL


def _restore_sigterm(previous: _SignalHandler) -> None:
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


class Lab:
    """The lab of `topology`, recorded in `state_dir`; see the module docstring.

    ``with Lab(topology, state_dir) as lab:`` builds it and removes it on leaving.
    `runner` runs each command (tests pass a recorder); `euid` is checked for root.
    """

    def __init__(
        self,
        topology: Topology,
        state_dir: Path,
        *,
        runner: Runner = run_command,
        euid: Callable[[], int] = os.geteuid,
    ) -> None:
        self.topology = topology
        self.state_dir = state_dir
        self._run = runner
        self._euid = euid
        self._cuts: set[Cut] = set()
        self._namespaces: list[str] = []
        self._sigterm: _SignalHandler = None

    @property
    def state_file(self) -> Path:
        return state_path(self.state_dir, self.topology.lab_id)

    @property
    def cuts(self) -> list[Cut]:
        """The cuts in force, sorted."""
        return sorted(self._cuts)

    # ------------------------------------------------------------------ lifecycle

    def create(self) -> None:
        """Build the lab; on any failure remove what was made and raise LabError."""
        require_root(self._euid)
        if self.state_file.exists():
            raise LabError(
                f"lab {self.topology.lab_id} is already recorded in {self.state_file}: "
                "remove it first (Lab.load(...).destroy())"
            )
        clash = [ns for ns in lab_namespaces(runner=self._run) if ns in self.topology.namespaces]
        if clash:
            raise LabError(
                f"namespaces of lab {self.topology.lab_id} already exist ({', '.join(clash)}): "
                "a lab left behind; sweep it first"
            )
        self._namespaces = list(self.topology.namespaces)
        self._save()  # the intent first: a lab killed while building is still removable
        try:
            for command in setup_commands(self.topology):
                self._run(command)
        except BaseException:
            self.destroy()
            raise

    def destroy(self) -> None:
        """Remove every namespace the state names (with its links, routes, rules and
        processes) and the state file; LabError listing what could not be removed."""
        errors = _remove(self._namespaces, self._run)
        if errors:
            raise LabError(f"lab {self.topology.lab_id} not fully removed: {'; '.join(errors)}")
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        self._namespaces = []
        self._cuts.clear()

    def __enter__(self) -> Lab:
        self._sigterm = _exit_on_sigterm()
        try:
            self.create()
        except BaseException:
            _restore_sigterm(self._sigterm)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.destroy()
        finally:
            _restore_sigterm(self._sigterm)

    # ------------------------------------------------------------------ faults

    def partition(self, a: str, b: str, direction: str = "both") -> list[Cut]:
        """Cut `a` from `b` (hosts or groups) in `direction`; the cuts added (none if
        all were in force already)."""
        added = [c for c in cuts_for(self.topology, a, b, direction) if c not in self._cuts]
        for cut in added:
            self._run(rule_command(self.topology, cut, "add"))
            self._cuts.add(cut)
            self._save()
        return added

    def heal(self, a: str, b: str, direction: str = "both") -> list[Cut]:
        """Undo the cuts of ``partition(a, b, direction)`` that are in force; those."""
        removed = [c for c in cuts_for(self.topology, a, b, direction) if c in self._cuts]
        for cut in removed:
            self._run(rule_command(self.topology, cut, "del"))
            self._cuts.discard(cut)
            self._save()
        return removed

    def heal_all(self) -> list[Cut]:
        """Undo every cut in force; those."""
        removed = self.cuts
        for cut in removed:
            self._run(rule_command(self.topology, cut, "del"))
            self._cuts.discard(cut)
            self._save()
        return removed

    # ------------------------------------------------------------------ hosts

    def add_relay_address(self, group: str, number: int = 0) -> str:
        """Give the router relay address `number` of `group` (for a
        :class:`~rideout.lab.relay.Link` to listen on); that address. Idempotent."""
        address = self.topology.relay_address(group, number)
        self._run(
            [
                "ip",
                "-n",
                self.topology.router_netns,
                "addr",
                "replace",
                address + "/32",
                "dev",
                "lo",
            ]
        )
        return address

    def intercept(self, source: str, host: str, port: int) -> None:
        """Deliver TCP from `source` (host or group) to `host`'s `port` to the router,
        where a transparent :class:`~rideout.lab.relay.Link` on `host`'s address relays
        it (:func:`~rideout.lab.topology.intercept_commands`): the WAN link without
        giving anyone a relay address. Gone with the lab."""
        for command in intercept_commands(self.topology, source, host, port):
            self._run(command)

    def exec_argv(self, host: str) -> list[str]:
        """The argv prefix that runs a command on `host` (``ip netns exec NS``)."""
        return exec_argv(self.topology.host(host).netns)

    # ------------------------------------------------------------------ state

    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        state = {
            "version": _STATE_VERSION,
            "lab_id": self.topology.lab_id,
            "network": self.topology.network,
            "groups": _groups(self.topology),
            "namespaces": self._namespaces,
            "cuts": [asdict(c) for c in self.cuts],
        }
        replace_atomically(self.state_file, json.dumps(state, indent=2).encode() + b"\n")

    @classmethod
    def load(
        cls,
        state_dir: Path,
        lab_id: str,
        *,
        runner: Runner = run_command,
        euid: Callable[[], int] = os.geteuid,
    ) -> Lab:
        """The lab recorded in `state_dir` (for ``down`` and ``status`` in another
        process); LabError if none is, or the record cannot be read."""
        path = state_path(state_dir, lab_id)
        try:
            state = decode_object(path.read_bytes())
            topology = plan_topology(lab_id, state["groups"], network=state["network"])
            lab = cls(topology, state_dir, runner=runner, euid=euid)
            lab._namespaces = [str(n) for n in state["namespaces"]]
            lab._cuts = {Cut(str(c["src"]), str(c["dst"])) for c in state["cuts"]}
        except FileNotFoundError:
            raise LabError(f"no lab {lab_id} recorded in {state_dir}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LabError(f"{path} cannot be read: {exc}") from None
        return lab


def state_path(state_dir: Path, lab_id: str) -> Path:
    netns_prefix(lab_id)  # checks the id
    return state_dir / f"{lab_id}.json"


def _groups(topology: Topology) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {name: [] for name, _ in topology.groups}
    for host in topology.hosts:
        groups[host.group].append(host.name)
    return groups


async def start_in(
    lab: Lab,
    host: str,
    name: str,
    argv: Sequence[str],
    *,
    log_file: Path,
    env: dict[str, str] | None = None,
    death_signal: int = signal.SIGKILL,
) -> ManagedProcess:
    """Start `argv` on `host` as rideout starts every child (:class:`ManagedProcess`: a
    session of its own, output to `log_file`, killed when this process dies); the caller
    stops it (``await process.stop()``), and :meth:`Lab.destroy` kills it if not."""
    process = ManagedProcess(
        name, [*lab.exec_argv(host), *argv], log_file=log_file, env=env, death_signal=death_signal
    )
    await process.start()
    return process
