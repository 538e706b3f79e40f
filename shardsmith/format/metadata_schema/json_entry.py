"""An object of metadata.json as a typed entry: a dataclass whose fields are its JSON keys, turned into JSON and
back (`Entry`), and the errors a metadata.json that is not shardsmith's raises.

Guarantees: an entry read and written again keeps its keys' order and every key this version does not know
(`extra`); an entry the build made writes every field (None ones only where NULLABLE); an entry read from a layout
that lacked a key does not gain it unless it was set since. Reading raises MetadataError, naming the entry as a
JSON path, where a required entry or a container the schema nests is missing or of the wrong kind.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from shardsmith.format.naming import METADATA_FILE


class MetadataError(ValueError):
    """metadata.json is missing, unreadable or not shardsmith's; the message says which, in one line."""


class MetadataMissing(MetadataError):
    """The folder holds no metadata.json: no finished dataset."""



@dataclass(kw_only=True)
class Entry:
    """An object of metadata.json. Field names are its JSON keys; `extra` holds keys this version does not know
    and `read_keys` the keys of the object as read (empty for one the build made), which decide what is written
    back: a built entry writes every field (None ones only where `NULLABLE`), a read one the keys it had (and a
    field set since)."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset()  # written as null rather than left out
    NESTED: ClassVar[dict[str, Any]] = {}  # field -> how its JSON value becomes typed (_entry, list_of, map_of)

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    read_keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def to_json(self) -> dict:
        """This entry as a JSON object (new containers throughout: editing it leaves the entry unchanged)."""
        known = {}
        for f in _schema_fields(type(self)):
            value = getattr(self, f.name)
            if self._written(f, value):
                known[f.name] = _encode(value)
        if not self.read_keys:
            return known | {k: _encode(v) for k, v in self.extra.items()}
        ordered = {}
        for key in self.read_keys:
            if key in known:
                ordered[key] = known.pop(key)
            elif key in self.extra:
                ordered[key] = _encode(self.extra[key])
        return ordered | known | {k: _encode(v) for k, v in self.extra.items() if k not in ordered}

    def _written(self, f, value) -> bool:
        if value is None:
            return f.name in self.NULLABLE and (not self.read_keys or f.name in self.read_keys)
        if self.read_keys and f.name not in self.read_keys:
            return value != _default(f)  # a layout without the key: write it only when set since
        return True

    @classmethod
    def from_json(cls, raw: Any, where: str = "", path: str = METADATA_FILE):
        """The entry of a JSON object read from `path` at `where` (a JSON path, for messages). Values are taken
        as they are (`check_readable` checks the types the read side needs); MetadataError when `raw`, a
        container the schema nests, or a required entry is not there."""
        _require(isinstance(raw, dict), path, where, raw, "an object")
        names = {f.name: f for f in _schema_fields(cls)}
        values = {}
        for key, value in raw.items():
            if key in names:
                decode = cls.NESTED.get(key)
                values[key] = value if decode is None or value is None else decode(value, json_path(where, key), path)
        missing = [n for n, f in names.items() if n not in values and _default(f) is MISSING]
        if missing:
            raise MetadataError(f"{path}{': ' + where if where else ''} has no {missing[0]!r} entry")
        return cls(**values, extra={k: v for k, v in raw.items() if k not in names}, read_keys=tuple(raw))


def _schema_fields(cls) -> list:
    return [f for f in fields(cls) if f.name not in ("extra", "read_keys")]


def _default(f):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _encode(value):
    if isinstance(value, Entry):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def json_path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _require(holds: bool, path: str, where: str, value, expected: str) -> None:
    if not holds:
        raise MetadataError(f"{path}: {where or 'the document'} is {described(value)}, not {expected}")


def entry_of(cls):
    return lambda raw, where, path: cls.from_json(raw, where, path)


def list_of(cls):
    def decode(raw, where: str, path: str) -> list:
        _require(isinstance(raw, list), path, where, raw, "a list")
        return [cls.from_json(item, f"{where}[{i}]", path) for i, item in enumerate(raw)]
    return decode


def map_of(cls):
    def decode(raw, where: str, path: str) -> dict:
        _require(isinstance(raw, dict), path, where, raw, "an object")
        return {key: cls.from_json(item, json_path(where, key), path) for key, item in raw.items()}
    return decode



def described(value) -> str:
    """A JSON value as a message names it: short strings and numbers as they are, containers by kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
