"""Command-line options from config dataclasses, documented by the docstring under each field.

The docstring written below a dataclass field (as in `TrainConfig`) is the option's help text, so
an option is documented once, in the code, and `--help` can never drift from it. Nested config
dataclasses become dotted options: `--loss.epsilon_high 0.28`, `--critic.lr 1e-3`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import typing
from functools import lru_cache

__all__ = ["field_docs", "add_dataclass_arguments", "dataclass_from_args"]


@lru_cache(maxsize=None)
def field_docs(cls) -> dict[str, str]:
    """{field name: the string literal written right after the field in the class body}."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _parser_for(annotation):
    """(argparse type, choices, nargs) for a field's resolved type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return type(args[0]), list(args), None
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        kind, choices, nargs = _parser_for(inner[0])
        return (lambda text: None if text.lower() == "none" else kind(text)), choices, nargs
    if origin in (list, tuple):
        return args[0] if args else str, None, "+"
    if annotation is bool:
        return _boolean, None, None
    return annotation, None, None


def _boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false; got {text!r}")


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, prefix: str = "",
                            skip: tuple[str, ...] = ()) -> None:
    """Add one `--prefix.field` option per field of `cls` (recursing into nested dataclasses)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    group = parser.add_argument_group(f"{cls.__name__} ({prefix.rstrip('.') or 'top level'})",
                                      (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else None)
    for f in dataclasses.fields(cls):
        if f.name in skip or callable(f.default) and not isinstance(f.default, type):
            continue
        annotation = hints[f.name]
        if dataclasses.is_dataclass(annotation):
            add_dataclass_arguments(parser, annotation, prefix=f"{prefix}{f.name}.")
            continue
        if typing.get_origin(annotation) is typing.Union and any(
                typing.get_origin(a) is typing.Callable or a is typing.Callable for a in typing.get_args(annotation)):
            continue
        kind, choices, nargs = _parser_for(annotation)
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        group.add_argument(f"--{prefix}{f.name}", dest=f"{prefix}{f.name}", type=kind, choices=choices,
                           nargs=nargs, default=argparse.SUPPRESS,
                           help=f"{docs.get(f.name, '')} (default: {default!r})")


def dataclass_from_args(cls, args: argparse.Namespace, prefix: str = "", **overrides):
    """Build `cls` from parsed options (only those given on the command line override defaults)."""
    values = vars(args)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = dataclass_from_args(hints[f.name], args, prefix=f"{key}.")
        elif key in values:
            kwargs[f.name] = values[key]
    kwargs.update(overrides)
    return cls(**kwargs)
