"""One cgroup per sandboxed run: a memory limit and a process limit for its whole process tree.

Resource limits (``setrlimit``) are per process or per user: four children may each take the
address space one process is allowed, and every sandbox running as the same user shares one
process count. A cgroup bounds the tree of one run instead, however it forks. This module
creates the run's cgroups on the host (``memory.limit_in_bytes`` and ``pids.max``) under the
cgroups this process already belongs to, and removes them afterwards; the sandbox's process 1
moves itself in before anything untrusted starts (`verifiers.sandbox_init.join_cgroups`).

Supported: the cgroup v1 ``memory`` and ``pids`` controllers, where this process may create
child cgroups (root on the machines this project runs on). A machine with only cgroup v2, or
without write access, gets None from `cgroup_parents` and the sandbox falls back to splitting
its memory limit over a bounded process count (`verifiers.sandbox`).
"""

from __future__ import annotations

import itertools
import os
import time
from functools import lru_cache

__all__ = ["RunCgroup", "cgroup_parents"]

_PREFIX = "verifiers-sandbox-"
_CONTROLLERS = ("memory", "pids")
_counter = itertools.count()


def _own_cgroups() -> dict[str, str]:
    """{controller: path} of this process's v1 cgroups, from /proc/self/cgroup."""
    found = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                if controller:
                    found[controller] = path
    return found


def _v1_mounts() -> dict[str, tuple[str, str]]:
    """{controller: (mount point, root of the mount)} of the mounted cgroup v1 hierarchies."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            before, after = line.rstrip("\n").split(" - ", 1)
            fields, (fstype, _source, options) = before.split(), after.split(" ", 2)
            if fstype == "cgroup":
                for option in options.split(","):
                    found.setdefault(option, (fields[4], fields[3]))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent: str) -> None:
    """Remove the empty run cgroups that processes which have since died left under ``parent``."""
    for name in os.listdir(parent):
        owner = name[len(_PREFIX):].split("-")[0]
        if name.startswith(_PREFIX) and owner.isdigit() and not _alive(int(owner)):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


@lru_cache(maxsize=1)
def cgroup_parents() -> dict[str, str] | None:
    """{"memory": dir, "pids": dir}: where this process can create its runs' cgroups, or None.

    Each is this process's own cgroup of that controller; a probe directory is created and
    removed to check write access.
    """
    try:
        own, mounts = _own_cgroups(), _v1_mounts()
    except OSError:
        return None
    parents = {}
    for controller in _CONTROLLERS:
        if controller not in own or controller not in mounts:
            return None
        mount_point, mount_root = mounts[controller]
        relative = os.path.relpath(own[controller], mount_root)
        parent = os.path.normpath(os.path.join(mount_point, relative))
        probe = os.path.join(parent, f"{_PREFIX}{os.getpid()}-probe")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
            _remove_stale(parent)
        except OSError:
            return None
        parents[controller] = parent
    return parents


class RunCgroup:
    """The memory and pids cgroups of one run: ``memory_bytes`` for the tree's memory (page cache
    and tmpfs included), ``max_tasks`` for its processes and threads together."""

    def __init__(self, parents: dict[str, str], memory_bytes: int, max_tasks: int):
        name = f"{_PREFIX}{os.getpid()}-{next(_counter)}"
        self.dirs = [os.path.join(parents[c], name) for c in _CONTROLLERS]
        created = []
        try:
            for path in self.dirs:
                os.mkdir(path)
                created.append(path)
            memory_dir, pids_dir = self.dirs
            self._write(memory_dir, "memory.limit_in_bytes", memory_bytes)
            if os.path.exists(os.path.join(memory_dir, "memory.memsw.limit_in_bytes")):
                self._write(memory_dir, "memory.memsw.limit_in_bytes", memory_bytes)  # no way around it via swap
            self._write(pids_dir, "pids.max", max_tasks)
        except OSError:
            for path in created:
                os.rmdir(path)
            raise

    @staticmethod
    def _write(directory: str, name: str, value: int) -> None:
        with open(os.path.join(directory, name), "w") as f:
            f.write(str(value))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the sandbox's first process writes itself into."""
        return [os.path.join(path, "cgroup.procs") for path in self.dirs]

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove both cgroups (they empty as soon as the run's processes are reaped)."""
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
