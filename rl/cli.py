"""Command-line options from config dataclasses, documented by the docstring under each field.

The docstring written below a dataclass field (as in `TrainConfig`) is the option's help text, so
an option is documented once, in the code, and `--help` can never drift from it. Nested config
dataclasses become dotted options: `--learner.lr 1e-5`, `--algorithm.loss.epsilon_high 0.28`.
`ArgumentParser(short_options=...)` makes `--help` show the few options a user sets first, grouped by
config part, and `--help-all` every option.

Every script parses with `ArgumentParser`: bad input ends the program with one line that names the
option, the problem and the fix, then "(see --help)", not the whole usage. The argparse types below
(`output_dir`, `output_file`, `input_file`, `model_dir`, `at_least`) check a value when it is parsed,
before any model loads, so the error names the option ("argument --out: ..."); config fields named in
`PATH_FIELDS` get those checks in every script whose options come from a config dataclass.
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import types
import typing

from planner import paths
from planner.strategies.common import field_docs

__all__ = ["ArgumentParser", "PATH_FIELDS", "add_dataclass_arguments", "at_least", "dataclass_from_args", "input_file",
           "model_dir", "output_dir", "output_file"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, `prog: error: MESSAGE (see --help)`, with exit status 2:
    the message is what matters; the usage of a script with a hundred options buries it.

    `short_options`: the destinations (`task`, `learner.lr`, ...) of the options a user sets first. Then
    `--help` shows only those, grouped by config part (the part is the name before the first dot), and
    `--help-all` shows every option."""

    def __init__(self, *args, short_options: collections.abc.Sequence[str] | None = None, **kwargs) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.short_options = tuple(short_options) if short_options is not None else None
        self.part_docs: dict[str, str] = {}  # part name -> one line on it (add_dataclass_arguments fills it)
        self._show_all = self.short_options is None
        if self.short_options is not None:
            self.add_argument("--help-all", action=_HelpAll, help="show every option and exit")

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())} (see --help)\n")

    def format_help(self) -> str:
        if self._show_all:
            return super().format_help()
        actions = {a.dest: a for a in self._actions}
        unknown = [name for name in self.short_options if name not in actions]
        if unknown:
            raise ValueError(f"short_options names no option: {unknown}")
        helps = [a for a in self._actions if isinstance(a, (argparse._HelpAction, _HelpAll))]
        sections: dict[str, list] = {"": helps}
        for name in self.short_options:
            part = name.split(".")[0] if "." in name else next(
                (g.title for g in self._action_groups if actions[name] in g._group_actions), "")
            sections.setdefault(part, []).append(actions[name])
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, [a for section in sections.values() for a in section if a.option_strings]
                            + [a for a in self._actions if a.required and a.dest not in self.short_options], [])
        formatter.add_text(self.description)
        for part, section in sections.items():
            formatter.start_section(f"{part} ({self.part_docs[part].rstrip('.')})" if part in self.part_docs
                                    else part or "help")
            formatter.add_arguments(section)
            formatter.end_section()
        hidden = len([a for a in self._actions if a.dest not in self.short_options and a not in helps])
        parts = f" (config parts: {', '.join(self.part_docs)})" if self.part_docs else ""
        notes = ", and the notes on them" if self.epilog else ""
        formatter.add_text(f"These are the options set most often; --help-all lists all {hidden} others{parts}{notes}.")
        return formatter.format_help()


class _HelpAll(argparse.Action):
    """`--help-all`: the whole help (every option), then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._show_all = True
        parser.print_help()
        parser.exit()


def _argument_type(check, label: str):
    """An argparse type from a check that raises ValueError: argparse then says "argument --x: MESSAGE"."""
    def convert(text: str):
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = label
    return convert


output_dir = _argument_type(lambda text: str(paths.check_output_dir(text, "the folder")), "output folder")
"""An output folder: a folder, or one that can be made, and writable."""
output_file = _argument_type(lambda text: str(paths.check_output_file(text, "the file")), "output file")
"""An output file: not a folder; its folder exists or can be made, and is writable."""
input_file = _argument_type(lambda text: str(paths.check_input_file(text, "the file")), "input file")
"""An existing file to read."""
model_dir = _argument_type(lambda text: str(paths.check_model_dir(text, "the folder")), "model folder")
"""A model folder (a save_pretrained folder, with a config.json)."""


def at_least(low: int | float, kind=int):
    """An argparse type: a number (int by default) >= `low`."""
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value >= low:
            raise ValueError(f"must be {'an integer' if kind is int else 'a number'} >= {low}; got {text!r}")
        return value
    return _argument_type(check, f"number >= {low}")


PATH_FIELDS = {"output_dir": output_dir, "tree_store": output_file}
"""Config fields (of any config dataclass) that `add_dataclass_arguments` checks as paths when parsed."""


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
        return _optional(kind), choices, nargs
    if origin in (list, tuple):
        return args[0] if args else str, None, "+"
    if annotation is bool:
        return _boolean, None, None
    return annotation, None, None


def _optional(kind):
    """`kind`, or None for the text "none"."""
    def convert(text: str):
        return None if text.lower() == "none" else kind(text)
    convert.__name__ = kind.__name__
    return convert


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
    if prefix.count(".") == 1 and hasattr(parser, "part_docs") and cls.__doc__:  # a part: its one-line summary
        parser.part_docs[prefix.rstrip(".")] = " ".join(cls.__doc__.strip().split("\n\n")[0].split())
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
        if f.name in PATH_FIELDS:
            kind = _optional(PATH_FIELDS[f.name]) if type(None) in typing.get_args(annotation) else PATH_FIELDS[f.name]
        group.add_argument(f"--{prefix}{f.name}", dest=f"{prefix}{f.name}", type=kind, choices=choices,
                           nargs=nargs, default=argparse.SUPPRESS, metavar=None if choices else f.name.upper(),
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
