"""What people and services type: numbers on the command line, and text that gets printed.

**Numbers.** Command-line options and settings in the environment.

Python's ``int`` and ``float`` accept more than a person means by a number: digits of any
script (``int("١٢")`` is 12, and so is ``int("１２")``), underscores between digits
(``float("1_0")`` is 10.0), surrounding spaces and, for ``float``, ``nan`` and ``inf``. A
script that passes such a value has a bug, and a number it did not mean is worse than a
refusal. So the lab accepts only what the decimal notation on a keyboard writes: ASCII
digits, an optional sign, for a decimal an optional point and exponent; each caller then
checks its own range.

**Text that is stored and later printed** (evidence, a ticket's fields, a person's reason):
it must not hold a character that steers a terminal or reorders what is displayed. Those are
the C0 and C1 controls (NUL, ESC and the escapes it starts, line breaks), the line and
paragraph separators, and the bidirectional controls (U+202E, right-to-left override, makes
``exe.txt`` display as ``txt.exe``). Other formatting characters stay: a no-break space or the
zero-width joiner inside an emoji steer nothing. What a caller does with a finding (refuse the
text, or write the character as its escape) is the caller's decision.
"""

from __future__ import annotations

import re

from .errors import shown

#: Characters that steer a terminal or reorder displayed text (see the module's docstring).
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

# [0-9], not \d: \d matches the digits of every script.
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: Longer than any number the lab takes; a longer text is not read digit by digit.
_MAX_CHARS = 40


def parse_whole(text: str) -> int:
    """``text`` as a whole number in ASCII digits (``"12"``, ``"-3"``), or ValueError naming it."""
    if len(text) > _MAX_CHARS or not _WHOLE.fullmatch(text):
        raise ValueError(f"{shown(text, 60)} is not a whole number written in the digits 0-9")
    return int(text)


def parse_decimal(text: str) -> float:
    """``text`` as a decimal number in ASCII digits (``"0.5"``, ``"2"``, ``"1e-3"``), or ValueError naming it."""
    if len(text) > _MAX_CHARS or not _DECIMAL.fullmatch(text):
        raise ValueError(f"{shown(text, 60)} is not a decimal number written in the digits 0-9")
    return float(text)


def first_unprintable(text: str, *, allow: str = "") -> str | None:
    """The first character of ``text`` that may not be printed as it is, or None; ``allow``
    names controls a field may hold all the same (a summary's ``\\n`` and ``\\t``)."""
    for found in UNPRINTABLE.finditer(text):
        if found.group() not in allow:
            return found.group()
    return None


def escaped(text: str) -> str:
    """``text`` with every character of :data:`UNPRINTABLE` written as its escape (``\\x1b``)."""
    return UNPRINTABLE.sub(lambda found: ascii(found.group())[1:-1], text)
