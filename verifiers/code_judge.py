"""Judge a HumanEval completion so that the program under test cannot forge the verdict.

Running ``prompt + completion + test + check(entry_point)`` and counting exit status 0 as a pass
(the original harness) lets the completion decide: ``os._exit(0)`` before the tests, an object
whose ``__eq__`` is always True, patched builtins or an overwritten ``check`` all "pass". Here two
sandboxed processes (`verifiers.sandbox`, each in its own namespaces when available) share the work:

- the **judge** holds only the dataset's trusted code: the problem's prompt (which defines
  helpers such as ``poly`` or ``encode_cyclic``) and its ``test`` with ``check``. It calls
  ``check(candidate)`` with a *proxy*: each call sends its arguments, strictly serialised
  (`verifiers.code_protocol`), to the candidate process and returns the value that comes back.
  The verdict is decided here only: "passed" when ``check`` returned normally and no call failed.
  The judge gets its code on stdin (never on the command line, which other processes can read),
  runs without ``site`` imports and makes itself non-dumpable, so a same-user process can
  neither read its memory nor ptrace it.
- the **candidate** holds the untrusted ``prompt + completion``. It never sees the tests. It
  answers each request by calling the real function and sending the result back, strictly
  serialised. Exiting early, patching its own builtins, returning forged objects or writing fake
  frames on its pipe can only make calls fail.

The parent (`judge_humaneval`) starts both, bounds the whole run by ``limits.timeout_s``, reads
the judge's verdict from a pipe only the judge holds, and kills both runs.

As root the two run under different user ids of their own, each in its own namespaces (when
available): the candidate cannot see the judge's process, files or memory, nor the dataset (its
canonical solutions included), and the judge reads nothing from disk the candidate can write
(its interpreter starts with ``-I -S -B``). Without root both run as the calling user: the judge
is still non-dumpable and gets its code on stdin, but a candidate could then rewrite files that
user owns, the interpreter's own files included when they live in that user's home (a venv):
run as root for a verdict that holds.

One HumanEval quirk is handled explicitly: HumanEval/33's ``check`` calls the function by its
name (``sort_third``) as well as through ``candidate``; in the judge that name is bound to the
same proxy, which is what the original harness meant (the name is the completed function).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from verifiers import code_protocol
from verifiers.sandbox import SandboxLimits, launch, read_truncated

__all__ = ["JudgeResult", "candidate_program", "judge_humaneval"]

_PROTOCOL_SOURCE = Path(code_protocol.__file__).read_text(encoding="utf-8")

# Shared by both tails: read the trusted stdin config and load the protocol from its source.
_LOAD = r"""
import types
job = json.loads(sys.stdin.read())
proto = types.ModuleType("verifiers_code_protocol")
exec(compile(job["protocol"], "code_protocol.py", "exec"), proto.__dict__)
"""

# The judge (trusted): prompt + test in one namespace, check(proxy), verdict on its own pipe.
_JUDGE_TAIL = _LOAD + r"""
request_fd, reply_fd, verdict_fd = cfg["request_fd"], cfg["reply_fd"], cfg["verdict_fd"]
state = {"calls": 0, "failure": None}

class CandidateCallFailed(Exception):
    pass

def candidate(*args, **kwargs):
    state["calls"] += 1
    call_id = state["calls"]
    try:
        proto.write_message(request_fd, {"id": call_id, "args": proto.encode(args), "kwargs": proto.encode(kwargs)})
        reply = proto.read_message(reply_fd)
        if reply.get("id") != call_id or set(reply) not in ({"id", "value"}, {"id", "error"}):
            raise proto.ProtocolError(f"reply out of order or malformed: keys {sorted(reply)[:4]}")
        if "error" in reply:
            raise CandidateCallFailed(f"call {call_id} raised in the candidate: {str(reply['error'])[:300]}")
        return proto.decode(reply["value"])
    except (proto.ProtocolError, OSError) as exc:
        failure = CandidateCallFailed(f"call {call_id} failed: {exc}")
    except CandidateCallFailed as exc:
        failure = exc
    if state["failure"] is None:
        state["failure"] = str(failure)
    raise failure

namespace = {"__name__": "__main__"}
for part in ("prompt", "test"):  # trusted, compiled by the caller already; report what else stops them
    try:
        exec(compile(job[part], f"<{part}>", "exec"), namespace)
    except BaseException as exc:
        proto.write_message(verdict_fd, {"verdict": "error", "calls": 0, "detail":
            f"the problem's {part} raised {type(exc).__name__} in the judge: {str(exc)[:300]}"})
        os._exit(0)
    if part == "prompt":
        namespace[job["entry_point"]] = candidate  # replaces the prompt's stub; HumanEval/33's check calls it by name
try:
    namespace["check"](candidate)
    verdict, detail = ("failed", state["failure"]) if state["failure"] else ("passed", "")
except AssertionError as exc:
    verdict, detail = "failed", state["failure"] or f"assertion failed: {str(exc)[:300]}"
except CandidateCallFailed as exc:
    verdict, detail = "failed", str(exc)
except BaseException as exc:
    verdict, detail = "failed", state["failure"] or f"check raised {type(exc).__name__}: {str(exc)[:300]}"
proto.write_message(verdict_fd, {"verdict": verdict, "detail": detail, "calls": state["calls"]})
os._exit(0)
"""

# The candidate (untrusted program, trusted loop): run prompt + completion, then serve calls.
_CANDIDATE_TAIL = _LOAD + r"""
import builtins
request_fd, reply_fd = cfg["request_fd"], cfg["reply_fd"]
sys.path.insert(0, cfg["workdir"])
namespace = {"__name__": "__main__", "__builtins__": builtins}
try:
    exec(compile(job["program"], "main.py", "exec"), namespace)
    startup_error = None
except BaseException as exc:  # SystemExit too: a program that exits at import serves no call
    startup_error = f"the program raised {type(exc).__name__} at import: {str(exc)[:300]}"
while True:
    try:
        request = proto.read_message(request_fd)
    except proto.ProtocolError:
        os._exit(0)  # the judge is done (or gone)
    try:
        if startup_error:
            raise RuntimeError(startup_error)
        function = namespace[job["entry_point"]]
        value = function(*proto.decode(request["args"]), **proto.decode(request["kwargs"]))
        reply = {"id": request.get("id"), "value": proto.encode(value)}
    except BaseException as exc:
        reply = {"id": request.get("id"), "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    proto.write_message(reply_fd, reply)
"""


@dataclass(frozen=True)
class JudgeResult:
    """Outcome of one judged HumanEval run."""

    status: Literal["passed", "failed", "timeout", "error"]
    """``passed``: the judge's ``check`` returned normally and every call succeeded. ``failed``: an
    assertion failed or a call failed (the candidate raised, exited, timed out of the protocol or
    returned something that is not plain data). ``timeout``: no verdict within the time limit.
    ``error``: the judge itself could not run (e.g. the trusted test code does not compile)."""
    detail: str
    """Why, in words (empty when passed)."""
    calls: int
    """How many times ``check`` called the candidate."""
    seconds: float
    """Wall-clock seconds of the whole run."""
    candidate_stdout: str
    """What the candidate process printed (truncated to ``limits.max_output_chars``)."""
    candidate_stderr: str
    """Its standard error, same limit."""
    judge_stderr: str
    """The judge's standard error (a traceback when status is ``error``), same limit."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def candidate_program(prompt: str, completion: str, entry_point: str) -> str:
    """The untrusted program: prompt + completion.

    A completion that redefines ``def entry_point`` (a whole function rather than the body) is
    put after the prompt on its own line; the prompt's docstring-only function is then replaced.
    """
    if f"def {entry_point}" in completion:
        return prompt + "\n    pass\n\n" + completion
    return prompt + completion


def _stdin_file(job: dict):
    """An unlinked temporary file holding ``job`` as JSON, positioned at the start (a child's stdin)."""
    handle = tempfile.TemporaryFile()
    handle.write(json.dumps({"protocol": _PROTOCOL_SOURCE, **job}).encode("utf-8"))
    handle.seek(0)
    return handle


def _check_trusted_parts(prompt: str, test: str, entry_point: str) -> None:
    """Raise ValueError naming the problem and the fix when the dataset's side cannot be judged.

    The judge runs the prompt by itself (for its helpers and imports) and then the test, so each
    must compile on its own and the test must define ``check``; otherwise every completion would
    come back as an unexplained error.
    """
    if not entry_point.isidentifier():
        raise ValueError(f"judge_humaneval: entry_point {entry_point[:80]!r} is not a Python identifier; "
                         "pass the name of the function the prompt defines (the HumanEval row's entry_point)")
    for name, text in (("prompt", prompt), ("test", test)):
        try:
            tree = ast.parse(text, filename=f"<{name}>")
        except SyntaxError as exc:
            raise ValueError(
                f"judge_humaneval: the {name} does not compile on its own ({exc.msg}, line {exc.lineno}); the judge "
                f"runs it without the completion, so it must be valid Python by itself, as HumanEval's are "
                + ("(the signature with its docstring): pass the dataset row's prompt, or give the "
                   "signature a docstring or a `...` body" if name == "prompt" else
                   "(assertions in a `def check(candidate):`): pass the dataset row's test")) from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body):
        raise ValueError("judge_humaneval: the test defines no top-level `def check(candidate):`; "
                         "pass the HumanEval row's test, whose check the judge calls with the completion")


def judge_humaneval(prompt: str, completion: str, test: str, entry_point: str,
                    limits: SandboxLimits | None = None) -> JudgeResult:
    """Judge ``completion`` against a HumanEval problem's own ``check`` (see the module docstring).

    Never raises on anything the completion does. Raises TypeError naming the argument when one
    of the four texts is not a str, and ValueError naming the fix when the prompt or the test
    cannot run by itself or the test has no ``check`` (`_check_trusted_parts`).
    """
    for name, value in (("prompt", prompt), ("completion", completion), ("test", test), ("entry_point", entry_point)):
        if not isinstance(value, str):
            raise TypeError(f"judge_humaneval: {name} must be a str, got {type(value).__name__}; "
                            "pass the HumanEval row's text fields")
    _check_trusted_parts(prompt, test, entry_point)
    limits = limits or SandboxLimits()
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    verdict_r, verdict_w = os.pipe()
    open_fds = {request_r, request_w, reply_r, reply_w, verdict_r, verdict_w}

    def close(*fds: int) -> None:  # each once: a closed number may already be another thread's file
        for fd in fds:
            if fd in open_fds:
                open_fds.discard(fd)
                os.close(fd)

    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as judge_err, \
            _stdin_file({"prompt": prompt, "test": test, "entry_point": entry_point}) as judge_in, \
            _stdin_file({"program": candidate_program(prompt, completion, entry_point), "entry_point": entry_point}) as candidate_in:
        try:
            with contextlib.ExitStack() as boxes:  # leaving it kills both runs and frees what they held
                boxes.enter_context(launch(
                    _JUDGE_TAIL, limits, writable=False, python_flags=("-I", "-S", "-B"), non_dumpable=True,
                    config={"request_fd": request_w, "reply_fd": reply_r, "verdict_fd": verdict_w},
                    stdin=judge_in, stderr=judge_err, pass_fds=(request_w, reply_r, verdict_w)))
                boxes.enter_context(launch(
                    _CANDIDATE_TAIL, limits, writable=True, config={"request_fd": request_r, "reply_fd": reply_w},
                    stdin=candidate_in, stdout=out, stderr=err, pass_fds=(request_r, reply_w)))
                close(request_r, request_w, reply_r, reply_w, verdict_w)  # EOF on verdict_r when the judge dies
                try:
                    verdict = code_protocol.read_message(verdict_r, deadline=start + limits.timeout_s)
                except code_protocol.ProtocolError as exc:
                    verdict = {"verdict": "timeout" if time.monotonic() - start >= limits.timeout_s else "error",
                               "detail": f"no verdict from the judge: {exc}"}
                seconds = time.monotonic() - start
        finally:
            close(*list(open_fds))
        status = verdict.get("verdict")
        if status not in ("passed", "failed", "timeout", "error"):
            status = "error"
        return JudgeResult(
            status=status,
            detail=str(verdict.get("detail", ""))[:1000],
            calls=int(verdict.get("calls", 0)) if isinstance(verdict.get("calls"), int) else 0,
            seconds=seconds,
            candidate_stdout=read_truncated(out, limits.max_output_chars),
            candidate_stderr=read_truncated(err, limits.max_output_chars),
            judge_stderr=read_truncated(judge_err, limits.max_output_chars),
        )
