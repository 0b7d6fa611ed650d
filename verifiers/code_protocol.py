"""The judge-candidate channel: strict serialisation of plain data and length-prefixed JSON frames.

A HumanEval judge (`verifiers.code_judge`) sends each call's arguments to the candidate process
and gets the return value back over a pipe. Only exact built-in types cross it, recursively:
``None``, ``bool``, ``int``, ``float`` (nan and inf included), ``str``, ``bytes``, ``list``,
``tuple``, ``dict``, ``set``, ``frozenset`` -- each tagged, so a tuple stays a tuple and a set a
set. Anything else (an object whose ``__eq__`` is always True, a subclass of ``int`` or ``str``,
a function) is refused by `encode`, and `decode` rebuilds only those exact types from a tagged
tree it validates, so whatever bytes a hostile candidate writes, the judge gets plain data or a
`ProtocolError`.

Frame: a 4-byte big-endian length, then that many bytes of UTF-8 JSON; frames longer than
``MAX_MESSAGE_BYTES`` are refused. Tagged value: ``["int", "12"]``, ``["float", "nan"]``,
``["list", [...]]``, ``["dict", [[key, value], ...]]`` and so on (see `encode`).

This module is stdlib-only and version-neutral on purpose: its source is also sent to, and run
inside, the sandboxed judge and candidate interpreters, so both ends use this exact code.
"""

import json
import os
import select
import struct
import time

__all__ = ["MAX_DEPTH", "MAX_MESSAGE_BYTES", "ProtocolError", "decode", "encode", "read_message", "write_message"]

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest frame either side accepts (HumanEval's arguments and results are a few KiB)."""
MAX_DEPTH = 64
"""Deepest nesting of containers in one value."""

_HEADER = struct.Struct("!I")
_SCALARS = {type(None): "none", bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}
_CONTAINERS = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}


class ProtocolError(Exception):
    """A value that may not cross the channel, a malformed frame, or a closed channel."""


def encode(value, depth=0):
    """The tagged JSON-ready tree of ``value``; raises ProtocolError for any type but the exact
    built-ins listed in the module docstring (subclasses included)."""
    if depth > MAX_DEPTH:
        raise ProtocolError(f"value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind in _SCALARS:
        tag = _SCALARS[kind]
        if tag == "none":
            return ["none"]
        if tag == "int":
            return ["int", str(value)]
        if tag == "float":
            return ["float", repr(value)]
        if tag == "bytes":
            return ["bytes", value.hex()]
        return [tag, value]
    if kind in _CONTAINERS:
        return [_CONTAINERS[kind], [encode(item, depth + 1) for item in value]]
    if kind is dict:
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    raise ProtocolError(f"a {kind.__module__}.{kind.__qualname__} may not cross the channel: "
                        "only exact built-in plain data (None, bool, int, float, str, bytes, list, tuple, "
                        "dict, set, frozenset)")


def _payload(node, kind):
    if len(node) != 2 or type(node[1]) is not kind:
        raise ProtocolError(f"malformed {node[0]!r} node")
    return node[1]


def decode(node, depth=0):
    """The value of a tagged tree made by `encode`; raises ProtocolError on anything malformed."""
    if depth > MAX_DEPTH:
        raise ProtocolError(f"value nested deeper than {MAX_DEPTH} levels")
    if type(node) is not list or not node or type(node[0]) is not str:
        raise ProtocolError("a tagged value must be a non-empty list starting with its tag")
    tag = node[0]
    try:
        if tag == "none" and len(node) == 1:
            return None
        if tag == "bool":
            return _payload(node, bool)
        if tag == "int":
            text = _payload(node, str)
            if not text.lstrip("-").isdigit() or not text.isascii():
                raise ProtocolError(f"malformed int {text[:40]!r}")
            return int(text)
        if tag == "float":
            return float(_payload(node, str))
        if tag == "str":
            return _payload(node, str)
        if tag == "bytes":
            return bytes.fromhex(_payload(node, str))
        if tag in ("list", "tuple", "set", "frozenset"):
            items = [decode(item, depth + 1) for item in _payload(node, list)]
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        if tag == "dict":
            pairs = _payload(node, list)
            if any(type(p) is not list or len(p) != 2 for p in pairs):
                raise ProtocolError("malformed dict node")
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in pairs}
    except (ValueError, TypeError, OverflowError) as exc:  # bad number text, unhashable key ...
        raise ProtocolError(f"malformed {tag!r} node: {exc}") from None
    raise ProtocolError(f"unknown tag {tag!r}")


def write_message(fd, message):
    """Write one frame holding ``message`` (a JSON-ready dict) to the file descriptor ``fd``."""
    data = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd, n, deadline):
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise ProtocolError("no message before the deadline")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise ProtocolError("channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_message(fd, deadline=None):
    """Read one frame from ``fd`` and return its JSON object (a dict).

    ``deadline``: a ``time.monotonic()`` value after which ProtocolError is raised; None blocks.
    Raises ProtocolError on a closed channel, an oversized frame or malformed JSON.
    """
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"frame of {size} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    try:
        message = json.loads(_read_exact(fd, size, deadline).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed frame: {str(exc)[:200]}") from None
    if type(message) is not dict:
        raise ProtocolError("a frame must hold a JSON object")
    return message
