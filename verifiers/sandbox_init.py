"""The trusted start of every sandboxed interpreter: isolate, limit, drop privileges.

`verifiers.sandbox.launch` runs ``python -I -c <this file's source + a tail> <cfg json>``: this
code runs first, inside the sandbox's own interpreter, before anything untrusted; the tail (the
caller's trusted program, which then runs the untrusted one) follows in the same interpreter and
finds ``cfg``, ``json``, ``os`` and ``sys`` defined. Stdlib only, for the same reason as
`verifiers.code_protocol`: its source is what runs in there. Importing it runs nothing.

With ``cfg["isolate"]`` the interpreter was started as root by ``unshare --mount --pid --net
--ipc --uts --cgroup --fork --kill-child``: it is process 1 of a new PID namespace, with a
network namespace of its own (no interface but a downed loopback, no abstract Unix sockets of
the host) and a private copy of the host's mounts. It then

1. joins the run's cgroups (``cfg["cgroups"]``: the memory and process limits of the whole tree);
2. builds a new root on a 1 MiB tmpfs: ``/usr`` and the interpreter's prefix bound read-only,
   ``/bin``, ``/lib``... as on the host (symlinks, or read-only binds), a fresh ``/proc`` that
   shows this PID namespace only, a ``/dev`` holding null, zero, full, random and urandom, and
   one tmpfs of ``cfg["disk_mb"]`` MiB that holds the work dir ``/sandbox``, ``/tmp`` and
   ``/dev/shm`` together (the disk quota; the kernel frees it when the namespace ends);
3. moves into it with ``pivot_root``, detaches the host's tree and makes ``/`` read-only;
4. forks: process 1 stays root, closes every file, reaps orphans and exits with the program's
   status (the kernel then kills whatever else runs in the namespace); the child goes on.

Every mode then sets the resource limits, drops to the run's own user id (``cfg["uid"]``, one
per running sandbox), sets no_new_privs, optionally makes itself non-dumpable, and without a
network namespace replaces Python's socket constructors with a guard.
"""

import ctypes
import json
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
"""pivot_root(2) has no glibc wrapper: its system call number per architecture."""
DEVICES = ("null", "zero", "full", "random", "urandom")
MAX_INODES = 16384
"""Files and directories the work tmpfs holds (bounds a bomb of empty files)."""

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"sandbox setup: {what}: {os.strerror(errno)}")


def _bytes(text):
    return None if text is None else text.encode()


def mount(source, target, fstype, flags, data=None):
    """mount(2); raises OSError naming the target."""
    _check(_libc.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data)),
           f"mount {target}")


def bind(source, target, read_only=True):
    """Bind ``source`` (a directory or a file) at ``target``, read-only and nosuid unless asked."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | (MS_RDONLY | MS_NODEV if read_only else 0))


def join_cgroups(procs_files):
    """Move this process (and so everything it will start) into the run's cgroups."""
    for path in procs_files:
        with open(path, "w") as f:
            f.write("0")


def build_root(cfg):
    """Steps 2 and 3 of the module docstring: after this, the host's files are out of reach."""
    root, uid = cfg["new_root"], cfg["uid"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=0755")
    for path in cfg["read_only"]:
        bind(path, root + path)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), root + host)
        elif os.path.isdir(host):
            bind(host, root + host)
    os.mkdir(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir(root + "/dev")
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
    for name in DEVICES:
        bind("/dev/" + name, root + "/dev/" + name, read_only=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    scratch = root + "/.scratch"
    os.mkdir(scratch)
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['disk_mb']}m,nr_inodes={MAX_INODES},mode=0755")
    work_owner, work_mode = (uid, 0o700) if cfg["writable"] and uid is not None else (0, 0o755)
    for sub, target, owner, mode in (("work", cfg["workdir"], work_owner, work_mode),
                                     ("tmp", "/tmp", 0, 0o1777), ("shm", "/dev/shm", 0, 0o1777)):
        os.mkdir(f"{scratch}/{sub}")
        os.chown(f"{scratch}/{sub}", owner, owner)
        os.chmod(f"{scratch}/{sub}", mode)
        os.makedirs(root + target, exist_ok=True)
        mount(f"{scratch}/{sub}", root + target, None, MS_BIND)
    _check(_libc.umount2(_bytes(scratch), MNT_DETACH), "detach the scratch tmpfs")
    os.rmdir(scratch)
    os.chdir(root)
    machine = os.uname().machine
    if machine not in SYS_PIVOT_ROOT:
        raise OSError(f"sandbox setup: pivot_root's system call number on {machine} is unknown")
    _check(_libc.syscall(SYS_PIVOT_ROOT[machine], b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _check(_libc.sethostname(b"sandbox", 7), "sethostname")


def become_init():
    """Step 4: fork; the parent (process 1) reaps and mirrors the child's status, the child returns."""
    child = os.fork()
    if child == 0:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # an out-of-memory kill takes the program's processes before the reaper
        return
    os.closerange(0, 1 << 20)  # the judge's pipes must see EOF when the program dies
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell reports it


def limit_and_drop(cfg):
    """Resource limits, the run's user id, no_new_privs, optional non-dumpable and socket guard."""
    for name, value in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if cfg.get("non_dumpable"):
        _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE, 0)")
    if cfg["guard_socket"]:
        import socket

        def _no_network(*args, **kwargs):
            raise PermissionError("network access is disabled in the sandbox")

        for name in ("socket", "create_connection", "socketpair", "fromfd", "create_server"):
            setattr(socket, name, _no_network)
        try:
            import _socket
            _socket.socket = _no_network
        except ImportError:
            pass
    os.chdir(cfg["workdir"])


def main():
    """Run every step for this process; returns the config for the tail."""
    cfg = json.loads(sys.argv[1])
    if cfg["isolate"]:
        join_cgroups(cfg["cgroups"])
        build_root(cfg)
        become_init()
    limit_and_drop(cfg)
    return cfg


if __name__ == "__main__":
    cfg = main()
