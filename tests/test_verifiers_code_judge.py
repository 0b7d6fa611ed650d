"""The HumanEval judge: forgeries of the exit-code design fail, honest completions are graded right.

Every hostile completion below is first run the old way -- ``run_code(humaneval_program(...))``,
the original harness, which counts exit status 0 as a pass -- to document that it forges a pass
there; then the judge must give it reward 0.0.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from verifiers.code import grade_humaneval, humaneval_program, run_code
from verifiers.code_judge import candidate_program, judge_humaneval
from verifiers.code_protocol import MAX_MESSAGE_BYTES, ProtocolError, decode, encode, read_message, write_message
from verifiers.sandbox import SandboxLimits

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# No candidate here is meant to hang (the timeout test sets its own limit), so the deadline is only a
# bound: 5 s was too tight on a 2-core machine with a load above 6 (a clean-clone run, 2026-12-05, saw
# the judge's child start past it and report "timeout" instead of "failed").
FAST = SandboxLimits(timeout_s=20.0, max_processes=32, memory_mb=512)


def _rows() -> dict[str, dict]:
    with gzip.open(DATA / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        return {row["task_id"]: row for row in map(json.loads, f)}


ROWS = _rows()


def _reference(task_id: str) -> dict:
    return {k: ROWS[task_id][k] for k in ("prompt", "test", "entry_point")}


def _old_design_passes(task_id: str, completion: str) -> bool:
    row = ROWS[task_id]
    return run_code(humaneval_program(row["prompt"], completion, row["test"], row["entry_point"]), FAST).passed


# ------------------------------------------------------------------ hostile completions

ALWAYS_EQUAL = """    class AlwaysEqual:
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
    return AlwaysEqual()
"""
INT_SUBCLASS = """    class Forged(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    return Forged(0)
"""
STR_SUBCLASS = """    class Forged(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    return Forged("")
"""
PATCHED_ABS = """    return 0.0
import builtins
builtins.abs = lambda x: 0.0
builtins.isinstance = lambda obj, cls: True
"""
PATCHED_ASSERTION = """    return False
import builtins, os, sys
builtins.AssertionError = type("AssertionError", (Exception,), {})
sys.excepthook = lambda *exc_info: os._exit(0)
"""
OVERWRITTEN_CHECK = """    return False
import sys
def _tracer(frame, event, arg):
    check = frame.f_globals.get("check")
    if check is not None and not getattr(check, "forged", False):
        def forged(candidate):
            pass
        forged.forged = True
        frame.f_globals["check"] = forged
    return _tracer
sys._getframe().f_trace = _tracer
sys.settrace(_tracer)
"""
FAKE_REPLIES = """    return True
import json, os, struct
for fd in range(3, 64):
    for message in ({"id": 1, "value": ["bool", True]}, {"verdict": "passed", "detail": "", "calls": 7}):
        data = json.dumps(message).encode()
        try:
            os.write(fd, struct.pack("!I", len(data)) + data)
        except OSError:
            pass
os._exit(0)
"""
FAKE_REPLIES_THEN_SERVE = FAKE_REPLIES.replace("os._exit(0)\n", "")  # stays alive: the frames meet real calls

HOSTILE = {
    "os._exit(0) at import": ("HumanEval/0", "    pass\nimport os\nos._exit(0)\n"),
    "sys.exit(0) at import": ("HumanEval/0", "    pass\nimport sys\nsys.exit(0)\n"),
    "os._exit(0) in the call": ("HumanEval/0", "    import os\n    os._exit(0)\n"),
    "sys.exit(0) in the call": ("HumanEval/0", "    import sys\n    sys.exit(0)\n"),
    "patched abs and isinstance": ("HumanEval/4", PATCHED_ABS),
    "patched AssertionError and excepthook": ("HumanEval/0", PATCHED_ASSERTION),
    "always-equal object": ("HumanEval/0", ALWAYS_EQUAL),
    "int subclass with forged __eq__": ("HumanEval/13", INT_SUBCLASS),
    "str subclass with forged __eq__": ("HumanEval/27", STR_SUBCLASS),
    "overwritten check": ("HumanEval/0", OVERWRITTEN_CHECK),
    "fake replies on the channel fds": ("HumanEval/0", FAKE_REPLIES),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_forgery_passes_the_exit_code_design_and_fails_the_judge(name):
    task_id, completion = HOSTILE[name]
    assert _old_design_passes(task_id, completion), f"{name}: the old design should have been fooled"
    assert grade_humaneval(completion, _reference(task_id), FAST) == 0.0
    row = ROWS[task_id]
    result = judge_humaneval(row["prompt"], completion, row["test"], row["entry_point"], FAST)
    assert result.status == "failed" and result.detail, (name, result)


def test_fake_replies_from_a_live_candidate_cannot_pass_every_call():
    # The forged frame answers call 1 with the right value (True); the verdict-shaped frame that
    # follows is not a reply, so call 2 fails. A candidate can only ever supply return values.
    row = ROWS["HumanEval/0"]
    result = judge_humaneval(row["prompt"], FAKE_REPLIES_THEN_SERVE, row["test"], row["entry_point"], FAST)
    assert result.status == "failed" and "call 2" in result.detail, result


def test_candidate_never_sees_the_test_code():
    marker = "marker-" + uuid.uuid4().hex
    row = ROWS["HumanEval/0"]
    test = row["test"] + f"\n# {marker}\n"
    snoop = (
        "    import glob\n"
        "    for path in glob.glob('/proc/*/cmdline') + glob.glob('/proc/*/environ') + glob.glob('/proc/*/fd/*'):\n"
        "        try:\n"
        "            print(path, open(path, 'rb').read())\n"
        "        except OSError:\n"
        "            pass\n"
        "    return True\n"
    )
    result = judge_humaneval(row["prompt"], snoop, test, row["entry_point"], SandboxLimits(timeout_s=10.0, max_output_chars=10**7))
    assert result.calls >= 1 and "/proc/" in result.candidate_stdout
    assert marker not in result.candidate_stdout and "def check" not in result.candidate_stdout


# ------------------------------------------------------------------ honest completions


def test_correct_passes_wrong_fails_and_infinite_loop_times_out():
    row = ROWS["HumanEval/0"]
    reference = _reference("HumanEval/0")
    assert grade_humaneval(row["canonical_solution"], reference, FAST) == 1.0
    whole_function = "```python\n" + row["prompt"] + row["canonical_solution"] + "```"
    assert grade_humaneval(whole_function, reference, FAST) == 1.0
    assert grade_humaneval("    return False\n", reference, FAST) == 0.0
    assert grade_humaneval("    raise ValueError('no')\n", reference, FAST) == 0.0
    assert grade_humaneval(None, reference, FAST) == 0.0
    start = time.monotonic()
    result = judge_humaneval(row["prompt"], "    while True:\n        pass\n", row["test"], row["entry_point"],
                             SandboxLimits(timeout_s=2.0))
    assert result.status == "timeout" and time.monotonic() - start < 4.0
    with pytest.raises(ValueError, match="reference lacks \\['test'\\]"):
        grade_humaneval("x", {"prompt": "", "entry_point": "f"})
    with pytest.raises(TypeError, match="completion must be a str"):
        judge_humaneval(row["prompt"], b"x", row["test"], row["entry_point"])


def test_a_prompt_or_test_that_cannot_run_by_itself_gets_a_clear_error():
    # Before: `def add(a, b):\n` as the prompt came back as status "error", detail "channel closed".
    test = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    with pytest.raises(ValueError, match="the prompt does not compile on its own .*docstring or a `...` body"):
        judge_humaneval("def add(a, b):\n", "    return a + b\n", test, "add", FAST)
    with pytest.raises(ValueError, match="the test does not compile on its own"):
        judge_humaneval("def add(a, b):\n    ...\n", "    return a + b\n", "def check(candidate)\n", "add", FAST)
    with pytest.raises(ValueError, match="defines no top-level `def check"):
        judge_humaneval("def add(a, b):\n    ...\n", "    return a + b\n", "assert True\n", "add", FAST)
    with pytest.raises(ValueError, match="not a Python identifier"):
        judge_humaneval("def add(a, b):\n    ...\n", "    return a + b\n", test, "add(", FAST)
    # A prompt that compiles but fails in the judge is named too, not a closed channel.
    result = judge_humaneval("import not_a_module_anywhere\ndef add(a, b):\n    ...\n", "    return a + b\n", test, "add", FAST)
    assert result.status == "error" and "prompt raised ModuleNotFoundError in the judge" in result.detail, result
    assert judge_humaneval("def add(a, b):\n    ...\n", "    return a + b\n", test, "add", FAST).passed


def test_helpers_from_the_prompt_and_calls_by_name():
    # HumanEval/38's check uses the prompt's encode_cyclic in the judge; HumanEval/33's check calls
    # sort_third by name, which the judge binds to the same proxy as `candidate`.
    for task_id in ("HumanEval/33", "HumanEval/38"):
        row = ROWS[task_id]
        result = judge_humaneval(row["prompt"], row["canonical_solution"], row["test"], row["entry_point"], FAST)
        assert result.passed and result.calls >= 7, (task_id, result)
    assert candidate_program("P", "def f():\n    pass\n", "f") == "P\n    pass\n\ndef f():\n    pass\n"


def test_every_canonical_solution_passes_and_empty_bodies_fail():
    """All 164 canonical solutions (and 164 empty bodies) under the judge, 4 runs at a time: about
    10 s on 2 shared cores, so not marked slow. No problem needs special handling beyond
    HumanEval/33's call by name: every check passes plain data and compares plain data."""
    rows = list(ROWS.values())
    limits = SandboxLimits(timeout_s=20.0)

    def judge(row_and_completion):
        row, completion = row_and_completion
        return judge_humaneval(row["prompt"], completion, row["test"], row["entry_point"], limits)

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        canonical = list(pool.map(judge, [(row, row["canonical_solution"]) for row in rows]))
        empty = list(pool.map(judge, [(row, "    pass\n") for row in rows]))
    elapsed = time.monotonic() - start
    assert [r["task_id"] for r, res in zip(rows, canonical) if not res.passed] == [], \
        [(r["task_id"], res.detail, res.judge_stderr[-300:]) for r, res in zip(rows, canonical) if not res.passed]
    assert not any(res.passed for res in empty)
    assert elapsed < 120, elapsed


# ------------------------------------------------------------------ the protocol


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(10**40), 1.5, -0.0, float("inf"), "héllo", b"\x00\xff", [1, [2.5, "x"]], (1, (2,)), (),
     {1, 2}, frozenset({(1, 2)}), {"a": [1], (1, 2): {3: None}}],
)
def test_plain_data_round_trips_exactly(value):
    again = decode(json.loads(json.dumps(encode(value))))
    assert again == value and type(again) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, again) == math.copysign(1, value)


def test_nan_round_trips_and_forged_types_are_refused():
    assert math.isnan(decode(encode(float("nan"))))

    class Sub(int):
        pass

    for forged in (Sub(1), [Sub(1)], {"k": object()}, lambda: 1, type("S", (str,), {})("x"), range(3)):
        with pytest.raises(ProtocolError, match="may not cross the channel"):
            encode(forged)


@pytest.mark.parametrize(
    "node",
    [["int", "1.5"], ["int", 5], ["bool", 1], ["str", 3], ["set", [["list", []]]], ["dict", [[["int", "1"]]]],
     ["tuple", "ab"], ["none", 1], ["object", "x"], [], "x", ["float", "one"]],
)
def test_malformed_trees_are_refused(node):
    with pytest.raises(ProtocolError):
        decode(node)


def test_frames_are_bounded_and_end_cleanly():
    read_fd, write_fd = os.pipe()
    try:
        write_message(write_fd, {"id": 1, "value": encode([1, 2])})
        assert read_message(read_fd) == {"id": 1, "value": ["list", [["int", "1"], ["int", "2"]]]}
        os.write(write_fd, (MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(ProtocolError, match="over the"):
            read_message(read_fd)
        start = time.monotonic()
        with pytest.raises(ProtocolError, match="deadline"):
            read_message(read_fd, deadline=time.monotonic() + 0.2)
        assert time.monotonic() - start < 1.0
        os.write(write_fd, (3).to_bytes(4, "big") + b"[1]")
        with pytest.raises(ProtocolError, match="JSON object"):
            read_message(read_fd)
    finally:
        os.close(write_fd)
    with pytest.raises(ProtocolError, match="channel closed"):
        read_message(read_fd)
    os.close(read_fd)
