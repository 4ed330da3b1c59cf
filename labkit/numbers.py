"""Numbers a person writes: command-line options and settings in the environment.

Python's ``int`` and ``float`` accept more than a person means by a number: digits of any
script (``int("١٢")`` is 12, and so is ``int("１２")``), underscores between digits
(``float("1_0")`` is 10.0), surrounding spaces and, for ``float``, ``nan`` and ``inf``. A
script that passes such a value has a bug, and a number it did not mean is worse than a
refusal. So the lab accepts only what the decimal notation on a keyboard writes: ASCII
digits, an optional sign, for a decimal an optional point and exponent; each caller then
checks its own range.
"""

from __future__ import annotations

import re

from .errors import shown

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
