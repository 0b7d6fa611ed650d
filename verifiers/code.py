"""Run Python programs in the sandbox, and grade HumanEval completions with a judge.

`run_code` / `run_many` are the generic "run a program, report how it ended" API: the program
runs inside every layer of `verifiers.sandbox` and its result says how it ended. Its ``passed``
status means only "exit status 0"; it is **not** a verdict on untrusted tests, because a program
that contains the tests can end with status 0 without passing them (``os._exit(0)``, an object
whose ``__eq__`` is always True, patched builtins, an overwritten ``check``). `humaneval_program`
builds the original harness's program, useful to run and inspect, not to grade.

`grade_humaneval` grades with `verifiers.code_judge.judge_humaneval`, where the verdict is decided
in a separate judge process that holds only the dataset's trusted code.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from verifiers.code_judge import candidate_program, judge_humaneval
from verifiers.sandbox import SandboxLimits, launch, read_truncated

__all__ = [
    "SandboxResult",
    "extract_code",
    "grade_humaneval",
    "humaneval_program",
    "run_code",
    "run_many",
]

Status = Literal["passed", "failed", "timeout", "error"]


@dataclass(frozen=True)
class SandboxResult:
    """How one sandboxed program ended."""

    status: Status
    """``passed`` (exit status 0 -- only that, not a verdict on tests the program contains),
    ``failed`` (an AssertionError ended it), ``timeout`` (wall-clock or CPU limit hit), ``error``
    (any other exception, crash, signal or limit)."""
    returncode: int | None
    """Exit code of the child (negative: killed by that signal); None on timeout."""
    stdout: str
    """What the program printed (truncated to ``limits.max_output_chars``)."""
    stderr: str
    """Its standard error, same limit."""
    seconds: float
    """Wall-clock seconds the run took."""

    @property
    def passed(self) -> bool:
        """Exit status 0 (see `status`)."""
        return self.status == "passed"


# Tail of the sandbox setup: the untrusted program arrives on stdin (no size limit, unlike the command
# line), becomes main.py in the work dir and runs as __main__ in this same interpreter, stdin at EOF.
_RUN_MAIN = r"""
program = sys.stdin.buffer.read()
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
with open("main.py", "wb") as _main:
    _main.write(program)
sys.argv = ["main.py"]
sys.path.insert(0, cfg["workdir"])
del cfg, json, program, _null, _main
import runpy
runpy.run_path("main.py", run_name="__main__")
"""


def _classify(returncode: int, stderr: str) -> Status:
    if returncode == 0:
        return "passed"
    if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "timeout"
    last_line = next((line for line in reversed(stderr.strip().splitlines()) if line.strip()), "")
    if returncode == 1 and last_line.startswith("AssertionError"):
        return "failed"
    return "error"


def run_code(program: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the Python source ``program`` in the sandbox and report how it ended.

    Never raises on anything the program does; raises TypeError when ``program`` is not a str.
    """
    if not isinstance(program, str):
        raise TypeError(f"run_code: program must be Python source as a str, got {type(program).__name__}; "
                        "decode bytes first (program.decode('utf-8'))")
    limits = limits or SandboxLimits()
    with tempfile.TemporaryFile() as source, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        source.write(program.encode("utf-8", errors="surrogatepass"))
        source.seek(0)
        start = time.monotonic()
        with launch(_RUN_MAIN, limits, writable=True, stdin=source, stdout=out, stderr=err) as box:
            try:
                returncode = box.proc.wait(timeout=limits.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            seconds = time.monotonic() - start
        stdout = read_truncated(out, limits.max_output_chars)
        stderr = read_truncated(err, limits.max_output_chars)
    if timed_out:
        return SandboxResult("timeout", None, stdout, stderr, seconds)
    return SandboxResult(_classify(returncode, stderr), returncode, stdout, stderr, seconds)


def run_many(programs: list[str], limits: SandboxLimits | None = None, workers: int = 2) -> list[SandboxResult]:
    """`run_code` over several programs, ``workers`` at a time; results in input order."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as executor:
        return list(executor.map(lambda p: run_code(p, limits), programs))


def humaneval_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The original HumanEval harness's program: prompt + completion, the tests, ``check(entry_point)``.

    Its exit status is forgeable by the completion (see the module docstring): grade with
    `grade_humaneval`, not with ``run_code(humaneval_program(...)).passed``.
    """
    return candidate_program(prompt, completion, entry_point) + "\n" + test + f"\ncheck({entry_point})\n"


def extract_code(completion: str) -> str:
    """The last fenced code block of a completion, or the completion itself when it has none."""
    fence = "```"
    end = completion.rfind(fence)
    start = completion.rfind(fence, 0, end) if end >= 0 else -1
    if start < 0:
        return completion
    block = completion[start + 3 : end]
    first_newline = block.find("\n")
    if first_newline >= 0 and block[:first_newline].strip().isidentifier():
        block = block[first_newline + 1 :]
    return block


def grade_humaneval(completion: str, reference: dict, limits: SandboxLimits | None = None) -> float:
    """1.0 when ``completion`` passes the problem's own ``check`` under the judge, else 0.0.

    ``reference`` holds the HumanEval fields ``prompt``, ``test`` and ``entry_point``; the
    completion's code is its last fenced block, or the whole text when it has none.
    """
    if not isinstance(completion, str):
        return 0.0
    missing = [key for key in ("prompt", "test", "entry_point") if key not in reference]
    if missing:
        raise ValueError(f"grade_humaneval: reference lacks {missing}; pass a HumanEval problem's "
                         "reference dict {'prompt', 'test', 'entry_point'} (verifiers.load_task('humaneval'))")
    result = judge_humaneval(reference["prompt"], extract_code(completion), reference["test"],
                             reference["entry_point"], limits)
    return 1.0 if result.passed else 0.0
