"""Text from the inputs, made safe to print: a label, URI, file name, error detail or tag is the user's data, and a
terminal takes some characters as commands (ESC sequences clear the screen or retitle the window; C1 controls do
the same on some terminals) or reorders the line around them (bidirectional overrides and isolates, U+202A-202E,
U+2066-2069).

`shown(text)` escapes every such character as Python would write it (`\\x1b`, `\\u202e`), so a person sees what the
data holds and the terminal receives only printable text. Line ends can be kept for text that is shardsmith's
own multi-line output (`keep_newlines`): the inputs cannot put one inside a label (a line break in a label is an
error row) or a URI shown in a line of its own. `control_characters(text)` says which characters make a label an
error row.
"""

from __future__ import annotations

import re
import unicodedata

# Categories a terminal does not print as themselves: controls (C0, DEL, C1), formats (bidi overrides and
# isolates, zero-width characters), line and paragraph separators, surrogates, private use, unassigned.
UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: never part of a label


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: object, keep_newlines: bool = False) -> str:
    """`text` (str() of it) with every character a terminal would not print as itself escaped; line ends kept with
    `keep_newlines`. Plain ASCII text is returned as it is, at the cost of one scan."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    kept = "\n" if keep_newlines else ""
    return "".join(_escape(c) if c not in kept and (unicodedata.category(c) in UNPRINTABLE_CATEGORIES)
                   else c for c in text)


def control_characters(text: str) -> str:
    """The control characters (C0, DEL, C1) in `text`, escaped and joined ("" when none)."""
    return "".join(sorted({_escape(c) for c in CONTROL.findall(text)}))
