"""A setting's command-line flag, declared on the settings dataclass field it fills: `option(default, Flag(...))`.

One declaration per option: the field's default and the Flag beside it are all that argparse, the Flex Template
files, the recorded options in metadata.json and the settings objects know of it (pipeline/options/ reads them).
Guarantees: `declared(cls)` lists every flag of a settings dataclass and of the settings dataclasses it nests, in
declaration order; `recorded_values(settings)` gives each recorded flag's value as JSON, read from the object the
build ran with, never from the command line. Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

FLAG = "flag"  # the key of a field's metadata that holds its Flag
NESTED = "nested"  # the key of a field's metadata that holds the Nested settings it is made of


@dataclass(frozen=True)
class Template:
    """What the Dataflow console shows of a flag as a Flex Template parameter."""

    label: str
    help: str  # "{default}" becomes the flag's default as the command line spells it
    regex: str = ""  # without ^ and $; a repeatable flag's: one item. Empty: from its choices, or true|false


@dataclass(frozen=True)
class Flag:
    """A field's flag. `help` may hold "{default}" (with a format spec, e.g. "{default:,}"): the default as the
    command line spells it. `parse` turns the command line's value into the field's, raising ValueError with a
    one-line message that names the flag; `text` spells the field's default as the command line would."""

    help: str
    template: Template | None  # None: not a Flex Template parameter (local runs only)
    group: str | None = None  # --help's section: inputs, output, checks; None: the command's own
    name: str = ""  # without dashes; "": the field's name
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    required: bool = False
    repeatable: bool = False  # given once per value (argparse's action="append")
    parse: Callable[[Any], Any] | None = None
    text: Callable[[Any], Any] | None = None
    recorded: str | None = ""  # its key among metadata.json's options; "": the field's name; None: not recorded
    recorded_if: Callable[[Any], bool] | None = None  # asked of the settings object that holds the field
    as_json: Callable[[Any], Any] | None = None  # the recorded value, when not the field's value with lists
    # A recorded value that decides a record's bytes or a row's split: an --incremental build must have the
    # published version's, or its new records would not belong with the carried ones.
    same_in_every_version: bool = False


def checked(test: Callable[[Any], bool], message: str) -> Callable[[Any], Any]:
    """A Flag's parse that keeps the value when `test` holds, else raises ValueError(message)."""
    def parse(value: Any) -> Any:
        if not test(value):
            raise ValueError(message)
        return value
    return parse


def option(default: Any, flag: Flag) -> Any:
    """A dataclass field with its default and its flag."""
    return dataclasses.field(default=default, metadata={FLAG: flag})


@dataclass(frozen=True)
class Nested:
    """A field holding settings of their own: the class that declares their flags, and the class the field holds
    (the same, or one that takes the same fields by keyword)."""

    declared_in: type
    made_as: type | None = None


def nested(declared_in: type, made_as: type | None = None, *, has_default: bool = False) -> Any:
    """A dataclass field holding settings whose flags `declared_in` declares; with `has_default`, their defaults."""
    metadata = {NESTED: Nested(declared_in, made_as)}
    if has_default:
        return dataclasses.field(default_factory=made_as or declared_in, metadata=metadata)
    return dataclasses.field(metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """One declared flag: the field it fills, where that field is, and the flag."""

    path: tuple[str, ...]  # field names from the outermost settings class down to the field
    field: dataclasses.Field
    flag: Flag

    @property
    def name(self) -> str:
        return self.flag.name or self.field.name

    @property
    def recorded_key(self) -> str:
        return self.flag.recorded or self.field.name

    @property
    def cli_default(self) -> Any:
        """The default as argparse holds it: the text the command line would give, or the field's default."""
        default = self.field.default if self.field.default is not dataclasses.MISSING else None
        if self.flag.repeatable:
            return list(default or ())
        return self.flag.text(default) if self.flag.text else default

    @property
    def annotation(self) -> str:
        return str(self.field.type)


def declared(cls: type, path: tuple[str, ...] = ()) -> Iterator[Declared]:
    """Every flag declared on `cls` and on the settings dataclasses its fields hold, in declaration order."""
    for field in dataclasses.fields(cls):
        if FLAG in field.metadata:
            yield Declared((*path, field.name), field, field.metadata[FLAG])
        elif NESTED in field.metadata:
            yield from declared(field.metadata[NESTED].declared_in, (*path, field.name))


def compose(cls: type, values: dict[tuple[str, ...], Any], path: tuple[str, ...] = ()) -> Any:
    """An instance of `cls` from `values` (keyed by path, as `declared` lists them), made by keyword, its nested
    settings composed the same way. A field without a value keeps its default."""
    kwargs = {}
    for field in dataclasses.fields(cls):
        where = (*path, field.name)
        if NESTED in field.metadata:
            inner = field.metadata[NESTED]
            made = compose(inner.declared_in, values, where)
            kwargs[field.name] = inner.made_as(**vars(made)) if inner.made_as else made
        elif where in values:
            kwargs[field.name] = values[where]
    return cls(**kwargs)


def value_at(settings: object, path: tuple[str, ...]) -> tuple[object, Any]:
    """(the settings object holding the field at `path`, the field's value)."""
    holder = settings
    for name in path[:-1]:
        holder = getattr(holder, name)
    return holder, getattr(holder, path[-1])


def as_json(value: Any) -> Any:
    """Tuples as lists, all the way down: what json.dumps writes of them anyway, made explicit."""
    if isinstance(value, (tuple, list)):
        return [as_json(item) for item in value]
    return value


def recorded_values(settings: object, flags: Iterator[Declared]) -> dict[str, Any]:
    """Each recorded flag's key and JSON value in `settings`, in the order of `flags`."""
    recorded = {}
    for flag in flags:
        if flag.flag.recorded is None:
            continue
        holder, value = value_at(settings, flag.path)
        if flag.flag.recorded_if is None or flag.flag.recorded_if(holder):
            recorded[flag.recorded_key] = (flag.flag.as_json or as_json)(value)
    return recorded


# Building blocks of the Flex Template's validation regexes.
GCS = r"gs://[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9]"
GCS_PATH = GCS + r"(/[^,\r\n]*)?"  # no commas: lists of them are comma-separated
GCS_FOLDER = GCS + r"(/[^\r\n]*)?"
COLUMN = r"[A-Za-z_][A-Za-z0-9_ .-]{0,99}"
NUMBER = r"[0-9]*\.?[0-9]+"
COUNT = r"[1-9][0-9]{0,14}"


def comma_list(item: str) -> str:
    return f"{item}(,{item})*"
