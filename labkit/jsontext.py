"""JSON as labkit reads and writes it: one spelling out, strict parsing in.

Python's ``json`` module is lenient in ways that matter for durable rows. It accepts
``NaN`` and ``Infinity`` (tokens that are not JSON, and that other readers refuse), keeps
the last of two duplicated keys without a word, and lets a deeply nested document raise
``RecursionError`` instead of a parsing error. Evidence, receipts and the provider's log
are read back by other processes, so they are parsed with :func:`strict_loads`, which
turns each of those into a :class:`JsonProblem` with a one-line reason.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

#: Deeper than this is not a queue diagnostic; it is an attack on the parser (07_evidence_contract).
MAX_DEPTH = 32

#: Where a parsed string can get a surrogate from text that is UTF-8: only from a ``\\uD800``-``\\uDFFF``
#: escape (a pair of them, an emoji, is fine; :func:`_check_text` tells which).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonProblem(ValueError):
    """The text is not strict JSON, or not JSON labkit will hold.

    ``rule`` names the rule it broke (``no-nan-or-infinity``, ``unique-keys``, ...), so that a
    caller can report it and a test can compare it; ``reason`` fits on one line.
    """

    def __init__(self, rule: str, reason: str):
        self.rule, self.reason = rule, reason
        super().__init__(reason)


def canonical_json(value: object) -> str:
    """One spelling per value (sorted keys, no spaces), so equal evidence has equal digests.

    ``allow_nan=False``: a float that JSON cannot spell is refused here rather than
    written as a token that no strict reader accepts.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(text: str) -> str:
    """The sha256 of ``text`` as UTF-8, in hex: every digest labkit stores (evidence, diagnostics,
    a ticket request's fingerprint) is this one function, so two modules cannot disagree on it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _refuse_constant(name: str) -> Any:
    raise JsonProblem("no-nan-or-infinity", f"{name} is not a JSON number")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise JsonProblem("unique-keys", f"the key {key[:40]!r} appears twice in one object")
        seen[key] = value
    return seen


def _finite_float(text: str) -> float:
    """A JSON number that a double cannot hold (``1e400``) would become ``inf``: refuse it."""
    value = float(text)
    if math.isinf(value):
        raise JsonProblem("number-size", f"the number {text[:20]} is too large for a double")
    return value


def strict_loads(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON: UTF-8, no NaN or Infinity, no duplicated keys, nesting bounded.

    Raises :class:`JsonProblem` for anything else, never ``RecursionError``,
    ``UnicodeDecodeError`` or ``ValueError``; a string must be Unicode text (no lone surrogate).
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonProblem("utf-8", "not UTF-8 text") from None
    else:
        text = data
    if text.startswith("\ufeff"):
        raise JsonProblem("no-byte-order-mark", "starts with a byte-order mark, which JSON does not allow")
    # Bound the nesting before parsing: the C parser recurses once per level.
    _check_depth(text, max_depth)
    try:
        value = json.loads(
            text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicates, parse_float=_finite_float
        )
    except JsonProblem:
        raise  # a hook's own refusal (NaN, a duplicated key, a number too large) keeps its rule
    except json.JSONDecodeError as error:
        raise JsonProblem("json-syntax", f"not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except RecursionError:  # pragma: no cover - _check_depth bounds the depth first
        raise JsonProblem("nesting-depth", f"nested deeper than {max_depth} levels") from None
    except ValueError as error:  # Python's own limits, e.g. an integer of more than 4300 digits
        raise JsonProblem("number-size", f"not JSON labkit can hold ({str(error).split(';')[0][:80]})") from None
    if _SURROGATE_ESCAPE.search(text) or not _is_utf8(data):
        _check_text(value)  # from text that is UTF-8, only an escape can make a surrogate
    return value


def _is_utf8(data: bytes | str) -> bool:
    """Whether ``data`` (bytes decoded above, or text) is UTF-8 text: text holding a lone surrogate is not."""
    if isinstance(data, bytes):
        return True
    try:
        data.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True



def _check_text(value: Any) -> None:
    """Refuse strings that are not Unicode text: a lone surrogate (``"\\ud800"``) parses, but
    cannot be written back out as UTF-8, so it would fail later, far from its cause."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonProblem("unicode-text", "a string holds a lone surrogate, which is not Unicode text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


def _check_depth(text: str, max_depth: int) -> None:
    """Refuse text whose brackets nest deeper than ``max_depth``, skipping string contents."""
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot nest deeper than the number of openers: skip the scan
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                raise JsonProblem("nesting-depth", f"nested deeper than {max_depth} levels")
        elif char in "]}":
            depth -= 1
