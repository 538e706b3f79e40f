"""`json.dumps(value, indent=2, ensure_ascii=False)`, the same text, at the speed of json's C encoder.

With `indent`, the standard library encodes in pure Python: a metadata.json of 105 shards x 1,000 labels (3 MB,
mostly each shard's `label_counts`) took about 0.18 s to encode, twice a build. Here each container that holds
no container (a shard's label counts, a list of names) is encoded by the C encoder in one call, its item
separator carrying the line break and the indent; only the containers around them are walked in Python.

Guarantee: `dumps_indented(value)` == `json.dumps(value, indent=2, ensure_ascii=False)` for every value, its
exceptions included: a value holding what this module does not walk itself (a dict with a key that is not a
string, an object json cannot encode) is handed to `json.dumps` whole.
"""

from __future__ import annotations

import json

_INDENT = 2
_CONTAINERS = (dict, list, tuple)


class _Unwalked(Exception):
    """A value this module leaves to json.dumps whole."""


def dumps_indented(value: object) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)`, byte for byte (see the module)."""
    try:
        return _encoded(value, 0)
    except (_Unwalked, RecursionError):  # RecursionError: a value that holds itself, or nests deeper than Python
        return json.dumps(value, indent=_INDENT, ensure_ascii=False)


def _encoded(value: object, level: int) -> str:
    if isinstance(value, dict):
        if not value:
            return "{}"
        if not all(issubclass(kind, str) for kind in set(map(type, value))):
            raise _Unwalked  # keys json converts (numbers, booleans, None) or refuses
        inner = "\n" + " " * (_INDENT * (level + 1))
        if _scalars(value.values()):
            body = _flat(value, inner)[1:-1]
        else:
            body = ("," + inner).join(f"{_flat(key, inner)}: {_encoded(item, level + 1)}"
                                      for key, item in value.items())
        return "{" + inner + body + "\n" + " " * (_INDENT * level) + "}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        inner = "\n" + " " * (_INDENT * (level + 1))
        if _scalars(value):
            body = _flat(value, inner)[1:-1]
        else:
            body = ("," + inner).join(_encoded(item, level + 1) for item in value)
        return "[" + inner + body + "\n" + " " * (_INDENT * level) + "]"
    return _flat(value, "")


def _scalars(items) -> bool:
    """Whether none of `items` is a container (their types gathered in C: a shard's 1,000 label counts are
    one set of one type)."""
    return not any(issubclass(kind, _CONTAINERS) for kind in set(map(type, items)))


def _flat(value: object, inner: str) -> str:
    """The C encoder's text of a scalar, or of a container of scalars with `,` + `inner` between its items."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=("," + inner, ": "))
    except (TypeError, ValueError):
        raise _Unwalked from None
