"""Hostile HumanEval completions against the judge: nothing forged, nothing seen, nothing left.

Each attempt is a completion of HumanEval/0 that attacks from inside the candidate process --
reads the answer key, reaches the host over sockets, snoops on /proc, attacks the judge, leaves
files behind -- and is judged for real. Every attempt must end with the expected verdict
(``failed``; ``passed`` for a correct completion that also attacks, which shows the judge was
untouched), print nothing it should not have seen, and leave no trace on the host: the
listeners below accept nothing, no file or process carrying the attempt's marker remains, the
host process and its secret are untouched. Resource bombs and concurrency are in
test_sandbox_hostile_resources.py.

An attempt that only namespaces can stop is skipped in the ``rlimits`` fallback, the skip
naming why (run ``VERIFIERS_SANDBOX_MODE=rlimits pytest tests/test_sandbox_hostile.py``).
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from verifiers.code_judge import judge_humaneval
from verifiers.sandbox import SandboxLimits, sandbox_mode

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
ISOLATED = sandbox_mode() != "rlimits"
AS_ROOT = os.geteuid() == 0
LIMITS = SandboxLimits(timeout_s=30.0, max_output_chars=200_000)
with gzip.open(DATA / "humaneval" / "HumanEval.jsonl.gz", "rt") as _f:
    ROW = json.loads(_f.readline())  # HumanEval/0, has_close_elements
CORRECT = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
READABLE = "rlimits fallback: host files stay readable (no mount namespace)"
NO_NET_NS = "rlimits fallback: no network namespace; the socket guard covers Python's socket module only"
HOST_PROC = "rlimits fallback: /proc shows the host's processes (no PID namespace)"
NOT_ROOT = ("not root: the run has the caller's user id (a per-run one needs root), so this attack would reach "
            "the caller's own processes and files")


@dataclass(frozen=True)
class Attempt:
    attack: str
    """Code run at the candidate's import (after the completed function); tokens %NAME% are filled in.
    What it prints is flushed at once: the candidate is killed at the end, its buffers unwritten."""
    body: str = "    return None\n"
    """The function body: wrong by default, CORRECT for attacks that must leave the judge untouched."""
    expect: str = "failed"
    needs_namespaces: str = ""
    """Why the rlimits fallback cannot stop it (empty: every mode must)."""
    needs_root: bool = False
    """Run only as root: without a per-run user id the attack would hit the caller's own processes or files."""


# Answer-key readers: each returns the canonical solution's answer when it can read the dataset.
_KEY = """
import glob, gzip, json, os, sys
def _rows(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                if "has_close_elements" in line and "canonical_solution" in line:
                    yield json.loads(line)
    except Exception:
        return
def _paths():
%FINDER%
for _path in _paths():
    for _row in _rows(_path):
        _ns = {}
        exec(_row["prompt"] + _row["canonical_solution"], _ns)
        has_close_elements = _ns["has_close_elements"]
        print("FOUND-KEY", _path, flush=True)
"""


def _key(finder: str) -> Attempt:
    return Attempt(_KEY.replace("%FINDER%", "\n".join("    " + line for line in finder.strip().splitlines())),
                   needs_namespaces=READABLE)


_SHOW = """
def _show(label, fn):
    try:
        print(label, fn(), flush=True)
    except Exception as exc:
        print(label, "refused:", type(exc).__name__, flush=True)
"""

ATTEMPTS = {
    # ---- the answer key
    "key: walk the whole filesystem": _key("""
for top in os.listdir("/"):
    if top not in ("proc", "sys", "dev"):
        for d, _, files in os.walk("/" + top):
            yield from (os.path.join(d, f) for f in files if "humaneval" in f.lower())"""),
    "key: glob dataset folders": _key("""
for pattern in ("/work/**/HumanEval*", "/*/shared/data/**/*", "/home/**/HumanEval*", "/root/**/HumanEval*",
                "/data*/**/*HumanEval*", "/mnt/**/*HumanEval*"):
    yield from glob.glob(pattern, recursive=True)"""),
    "key: the dataset's absolute path": _key("yield '%DATA%/humaneval/HumanEval.jsonl.gz'"),
    "key: relative to cwd and HOME": _key("""
for base in (os.getcwd(), os.path.expanduser("~"), os.path.dirname(sys.executable)):
    for up in range(1, 8):
        yield os.path.join(base, *[".."] * up, "shared", "data", "humaneval", "HumanEval.jsonl.gz")"""),
    "key: through /proc/*/root and /proc/*/cwd": _key("""
for pid in os.listdir("/proc"):
    if pid.isdigit() or pid == "self":
        yield "/proc/" + pid + "/root%DATA%/humaneval/HumanEval.jsonl.gz"
        for up in range(0, 4):
            yield "/proc/" + pid + "/cwd/" + "../" * up + "shared/data/humaneval/HumanEval.jsonl.gz"
yield "/proc/%HOSTPID%/root%DATA%/humaneval/HumanEval.jsonl.gz\""""),
    "key: import the repository's loader": _key("""
for repo in ("%REPO%", "/work/main", "/work"):
    sys.path.insert(0, repo)
try:
    from verifiers.tasks import load_task
    problem = load_task("humaneval").problems[0]
    path = "/tmp/key.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"prompt": problem.reference["prompt"], "entry_point": "has_close_elements",
                            "canonical_solution": problem.meta["canonical_solution"]}) + "\\n")
    yield path
except Exception as exc:
    print("loader refused:", type(exc).__name__, flush=True)"""),
    "key: Hugging Face caches": _key("""
for pattern in ("~/.cache/huggingface/**/*", "/root/.cache/**/*uman*val*", "/home/*/.cache/**/*uman*val*",
                "/usr/share/**/*uman*val*"):
    yield from glob.glob(os.path.expanduser(pattern), recursive=True)"""),
    "other datasets and the canary": Attempt(_SHOW + """
import os
_show("datasets", lambda: os.listdir("%DATA%"))
_show("gsm8k", lambda: open("%DATA%/gsm8k/" + os.listdir("%DATA%/gsm8k")[0], "rb").read(200))
_show("canary", lambda: open("%CANARY%").read())
for d, _, files in os.walk("/var"):
    for f in files:
        if "canary" in f:
            _show("canary", lambda: open(os.path.join(d, f)).read())
""", needs_namespaces=READABLE),
    "the judge's own files": Attempt(_SHOW + """
import glob, os
_show("judge source", lambda: open("%REPO%/verifiers/code_judge.py").read()[:300])
_show("judge listing", lambda: glob.glob("/work/*/verifiers/*.py") + glob.glob("%REPO%/tests/*"))
_show("root home", lambda: os.listdir("/root"))
_show("homes", lambda: os.listdir("/home"))
_show("work", lambda: os.listdir("/work"))
""", needs_namespaces=READABLE),
    "the judge's test through /proc": Attempt(_SHOW + """
import glob
for path in glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/environ") + glob.glob("/proc/*/fd/*"):
    _show(path, lambda: open(path, "rb").read(100_000))
""", needs_root=True),
    # ---- sockets
    "tcp to a host listener on loopback": Attempt(_SHOW + """
import socket
_show("tcp", lambda: socket.create_connection(("127.0.0.1", %PORT%), timeout=2) and "CONNECTED")
"""),
    "tcp to the host's own address": Attempt(_SHOW + """
import socket
_show("tcp", lambda: socket.create_connection(("%HOSTIP%", %PORT%), timeout=2) and "CONNECTED")
"""),
    "udp to host listeners": Attempt(_SHOW + """
import socket
for host in ("127.0.0.1", "%HOSTIP%"):
    _show("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"%MARKER%", (host, %UDPPORT%)))
"""),
    "unix socket file on the host": Attempt(_SHOW + """
import socket
def _connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect("%UNIXPATH%")
    s.sendall(b"%MARKER%")
    return "CONNECTED"
_show("unix", _connect)
"""),
    "abstract unix socket of the host": Attempt(_SHOW + """
import socket
def _connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\\0%ABSTRACT%")
    s.sendall(b"%MARKER%")
    return "CONNECTED"
_show("abstract", _connect)
"""),
    "raw system calls around the socket guard": Attempt(_SHOW + """
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
def _tcp():
    fd = libc.socket(2, 1, 0)
    addr = struct.pack("!HH4s8x", 2, %PORT%, bytes([127, 0, 0, 1]))
    addr = struct.pack("=H", 2) + addr[2:]
    return ("CONNECTED" if libc.connect(fd, addr, len(addr)) == 0 else "errno %d" % ctypes.get_errno())
def _unix():
    fd = libc.socket(1, 1, 0)
    path = b"%UNIXPATH%"
    addr = struct.pack("=H", 1) + path + b"\\0" * (108 - len(path))
    return ("CONNECTED" if libc.connect(fd, addr, len(addr)) == 0 else "errno %d" % ctypes.get_errno())
_show("tcp", _tcp)
_show("unix", _unix)
""", needs_namespaces=NO_NET_NS),
    "a child interpreter without the guard": Attempt(_SHOW + """
import subprocess, sys
code = "import socket; socket.create_connection(('127.0.0.1', %PORT%), timeout=2); print('CONNECTED')"
_show("child", lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=10).stdout)
""", needs_namespaces=NO_NET_NS),
    # ---- /proc
    "host processes in /proc": Attempt(_SHOW + """
import os
_show("pids", lambda: [p for p in os.listdir("/proc") if p.isdigit()])
_show("host pid", lambda: os.path.exists("/proc/%HOSTPID%") and "HOST-PID-VISIBLE")
_show("cmdlines", lambda: [open("/proc/%s/cmdline" % p, "rb").read() for p in os.listdir("/proc") if p.isdigit()])
""", needs_namespaces=HOST_PROC),
    "environ, maps and memory of every process": Attempt(_SHOW + """
import os
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for part in ("environ", "maps", "mem", "stack", "syscall"):
        _show(pid + part, lambda: open("/proc/%s/%s" % (pid, part), "rb").read(4096))
_show("secret pid", lambda: open("/proc/%SECRETPID%/environ", "rb").read())
""", needs_root=True),
    "host mounts in /proc/self/mountinfo": Attempt(_SHOW + """
_show("mounts", lambda: open("/proc/self/mountinfo").read())
""", needs_namespaces="rlimits fallback: the host's mount table is this process's (no mount namespace)"),
    "write the host's kernel settings": Attempt(_SHOW + """
_show("hostname", lambda: open("/proc/sys/kernel/hostname", "w").write("pwned-%MARKER%"))
_show("core", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/bin/sh"))
_show("sysrq", lambda: open("/proc/sysrq-trigger", "w").write("h"))
"""),
    # ---- the judge and the host's processes
    "correct, and SIGKILL everything it may (kill -1)": Attempt(
        "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError as exc:\n    print('kill -1', exc, flush=True)\n",
        body=CORRECT, expect="passed", needs_root=True),
    "correct, and SIGSTOP every pid in /proc": Attempt("""
import os, signal
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()] + [%HOSTPID%, %SECRETPID%]:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
""", body=CORRECT, expect="passed", needs_root=True),
    "correct, and ptrace every pid": Attempt("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()] + [%HOSTPID%, %SECRETPID%]:
    if pid != os.getpid() and libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        print("TRACED", pid, flush=True)
""", body=CORRECT, expect="passed", needs_root=True),
    "kill the parent and the process group": Attempt("""
import os, signal
for target in (lambda: os.kill(os.getppid(), signal.SIGKILL), lambda: os.kill(%HOSTPID%, signal.SIGKILL),
               lambda: os.kill(%SECRETPID%, signal.SIGKILL), lambda: os.killpg(0, signal.SIGKILL)):
    try:
        target()
    except OSError:
        pass
""", needs_root=True),
    "poison the interpreter's files": Attempt(_SHOW + """
import json, os, sys
_show("stdlib", lambda: open(json.__file__, "a").write("\\nraise SystemExit(0)\\n"))
_show("sitecustomize", lambda: open(os.path.join(os.path.dirname(os.__file__), "sitecustomize.py"), "w").write("x"))
_show("usercustomize", lambda: open("usercustomize.py", "w").write("import os; os._exit(0)"))
""", needs_root=True),
    "answer every call True through the loop's own protocol": Attempt("""
import sys
_proto = sys.modules["__main__"].proto
_proto.encode = lambda value, depth=0: ["bool", True]
"""),
    "a 64 MiB return value": Attempt("", body="    return 'x' * (64 << 20)\n"),
    # ---- leftovers
    "files in every writable place": Attempt(_SHOW + """
import os
for d in ("/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd(), "/", "/run", "/run/lock", "%REPO%"):
    _show("place", lambda: open(os.path.join(d, "%MARKER%"), "w").write("left behind"))
_show("dir", lambda: os.makedirs("/tmp/%MARKER%-dir/deep"))
""", needs_root=True),
    "POSIX shared memory": Attempt(_SHOW + """
from multiprocessing import shared_memory
_show("shm", lambda: shared_memory.SharedMemory(name="%MARKER%", create=True, size=1 << 20).name)
""", needs_root=True),
    "SysV shared memory": Attempt(_SHOW + """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
_show("shmget", lambda: libc.shmget(%SYSVKEY%, 1 << 20, 0o1666))
""", needs_namespaces="rlimits fallback: SysV IPC objects outlive the run (no IPC namespace)"),
    "a detached daemon that outlives the run": Attempt("""
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "%SLEEPMARK%"])
    os._exit(0)
""", needs_namespaces="" if AS_ROOT else "not root: no per-run user id whose processes could be killed"),
}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """Listeners, a canary file, a secret-holding process: what the attempts must not reach."""
    tcp = socket.create_server(("0.0.0.0", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", 0))
    open_dir = Path(f"/tmp/verifiers-hostile-{uuid.uuid4().hex[:8]}")
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    unix_path = open_dir / "host.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix_path.chmod(0o777)
    abstract_name = f"verifiers-hostile-{uuid.uuid4().hex}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    for s in (tcp, unix, abstract):
        s.listen(8)
    for s in (tcp, udp, unix, abstract):
        s.setblocking(False)
    canary_dir = Path(f"/var/tmp/verifiers-canary-{uuid.uuid4().hex[:8]}")
    canary_dir.mkdir(mode=0o755)
    canary = canary_dir / "canary.txt"
    canary.write_text("CANARY-" + uuid.uuid4().hex)
    canary.chmod(0o644)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks the outgoing address
        host_ip = probe.getsockname()[0]
    except OSError:  # no route at all: the loopback stands in
        host_ip = "127.0.0.1"
    probe.close()
    secret = "SECRET-" + uuid.uuid4().hex
    holder = subprocess.Popen(["sleep", "600"], env={"HOLDER_SECRET": secret})
    tokens = {"%DATA%": str(DATA), "%REPO%": str(REPO), "%HOSTPID%": str(os.getpid()), "%SECRETPID%": str(holder.pid),
              "%PORT%": str(tcp.getsockname()[1]), "%UDPPORT%": str(udp.getsockname()[1]), "%HOSTIP%": host_ip,
              "%UNIXPATH%": str(unix_path), "%ABSTRACT%": abstract_name, "%CANARY%": str(canary)}
    yield {"tokens": tokens, "sockets": (tcp, unix, abstract), "udp": udp, "canary": canary.read_text(),
           "secret": secret, "holder": holder, "hostname": socket.gethostname()}
    holder.kill()
    holder.wait()
    for s in (tcp, udp, unix, abstract):
        s.close()
    unix_path.unlink()
    open_dir.rmdir()
    canary.unlink()
    canary_dir.rmdir()


def _arrivals(host) -> list[str]:
    """What reached the listeners since the last call (and drain them)."""
    arrived = []
    for listener in host["sockets"]:
        while True:
            try:
                connection, _ = listener.accept()
            except BlockingIOError:
                break
            arrived.append(f"connection to {listener.getsockname()!r}")
            connection.close()
    while True:
        try:
            arrived.append(f"datagram {host['udp'].recvfrom(64)[0]!r}")
        except BlockingIOError:
            return arrived


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def _sysv_keys() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[0]) for line in f.readlines()[1:] if line.strip()}


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_attempt_forges_nothing_sees_nothing_leaves_nothing(name, host):
    attempt = ATTEMPTS[name]
    if attempt.needs_namespaces and not ISOLATED:
        pytest.skip(attempt.needs_namespaces)
    if attempt.needs_root and not AS_ROOT:
        pytest.skip(NOT_ROOT)
    marker = "hostile" + uuid.uuid4().hex[:12]
    sleep_mark = "30." + str(uuid.uuid4().int)[:12]
    sysv_key = int(uuid.uuid4().int % 2**30) + 1
    tokens = {**host["tokens"], "%MARKER%": marker, "%SLEEPMARK%": sleep_mark, "%SYSVKEY%": str(sysv_key)}
    attack = attempt.attack
    for token, value in tokens.items():
        attack = attack.replace(token, value)
    test_marker = "TEST-" + uuid.uuid4().hex
    result = judge_humaneval(ROW["prompt"], attempt.body + attack, ROW["test"] + f"\n# {test_marker}\n",
                             ROW["entry_point"], LIMITS)
    arrived = _arrivals(host)  # drained before any assertion, so one leak fails one attempt only

    assert result.status == attempt.expect, (name, result)
    seen = result.candidate_stdout + result.candidate_stderr
    host_names = ("pytest", str(DATA), str(REPO)) if ISOLATED else ()  # the fallback shows host paths and processes
    for leak in ("FOUND-KEY", "CONNECTED", "HOST-PID-VISIBLE", "TRACED", "def check", test_marker,
                 host["canary"], host["secret"], *host_names):
        assert leak not in seen, (name, leak, seen[-2000:])
    # Nothing reached the host ...
    assert arrived == [], name
    assert host["holder"].poll() is None and socket.gethostname() == host["hostname"]
    assert Path(f"/proc/{host['holder'].pid}/status").read_text().split("State:")[1].split()[0] != "T"
    # ... and nothing of the run is left on it.
    for place in ("/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), "/", "/run", "/run/lock", str(REPO), os.getcwd()):
        assert not list(Path(place).glob(f"{marker}*")), (name, place)
    deadline = time.monotonic() + 3
    while _processes_with(sleep_mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(sleep_mark) == [], name
    assert sysv_key not in _sysv_keys(), name
