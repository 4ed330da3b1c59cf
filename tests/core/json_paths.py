"""Shared by the property tests that change one part of a valid document: the document, and paths into it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import labkit


def reference_answer(incident: str) -> bytes:
    """Today's reference provider's answer for ``incident`` (its call log in a folder thrown away): a valid document."""
    with tempfile.TemporaryDirectory() as scratch:
        return labkit.ReferenceProvider(Path(scratch) / "calls.jsonl").read(incident)


def paths(value, prefix=()) -> list[tuple]:
    """Every path into a JSON value: keys of objects, indexes of arrays (the root is ())."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def at(value, path):
    """The part of ``value`` that ``path`` leads to (the object itself, so it can be changed in place)."""
    for part in path:
        value = value[part]
    return value
