"""Command-line options from config dataclasses, documented by the docstring under each field.

The docstring written below a dataclass field (as in `TrainConfig`) is the option's help text, so
an option is documented once, in the code, and `--help` can never drift from it. Nested config
dataclasses become dotted options: `--loss.epsilon_high 0.28`, `--critic.lr 1e-3`.
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import types
import typing

from planner.strategies.common import field_docs

__all__ = ["add_dataclass_arguments", "dataclass_from_args"]


def _is_callable(annotation) -> bool:
    """True for `Callable[...]` and `Callable[...] | None` fields."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    return any(typing.get_origin(a) is collections.abc.Callable for a in options)


def _parser_for(annotation):
    """(argparse type, choices, nargs) for a field's resolved type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return type(args[0]), list(args), None
    if origin in (typing.Union, types.UnionType):
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


def _default(f: dataclasses.Field, defaults):
    """The field's default: from `defaults` (an instance of its class) when given, else the declared one."""
    if defaults is not None:
        return getattr(defaults, f.name)
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, prefix: str = "",
                            skip: tuple[str, ...] = (), defaults=None) -> None:
    """Add one `--prefix.field` option per field of `cls` (recursing into nested dataclasses, whose
    defaults are those of the enclosing field's default instance). `defaults`: an instance of `cls`
    whose values are the shown defaults (None: the declared ones)."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    group = parser.add_argument_group(f"{cls.__name__} ({prefix.rstrip('.') or 'top level'})",
                                      (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else None)
    for f in dataclasses.fields(cls):
        if f.name in skip or callable(f.default) and not isinstance(f.default, type):
            continue
        annotation = hints[f.name]
        default = _default(f, defaults)
        if dataclasses.is_dataclass(annotation):
            add_dataclass_arguments(parser, annotation, prefix=f"{prefix}{f.name}.", defaults=default)
            continue
        if _is_callable(annotation):  # functions (answer extraction, rewards) are set from Python, not flags
            continue
        kind, choices, nargs = _parser_for(annotation)
        group.add_argument(f"--{prefix}{f.name}", dest=f"{prefix}{f.name}", type=kind, choices=choices,
                           nargs=nargs, default=argparse.SUPPRESS,
                           help=f"{docs.get(f.name, '')} (default: {default!r})")


def dataclass_from_args(cls, args: argparse.Namespace, prefix: str = "", defaults=None, **overrides):
    """Build `cls` from parsed options: only those given on the command line override the defaults
    (`defaults`, an instance of `cls`, or else the declared ones; nested dataclasses start from the
    enclosing field's default instance)."""
    values = vars(args)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            kwargs[f.name] = dataclass_from_args(hints[f.name], args, prefix=f"{key}.",
                                                 defaults=_default(f, defaults))
        elif key in values:
            kwargs[f.name] = values[key]
    kwargs.update(overrides)
    return cls(**kwargs) if defaults is None else dataclasses.replace(defaults, **kwargs)
