"""A progress bar for a cell that takes more than a few seconds, which nbval does not compare.

A learner waiting on a two-minute cell should see it move. But what a cell shows while it
runs is not what it ends with, and nbval compares the first display a cell sends with the
one stored in the notebook (the last one, after every update). So the bar is a picture
only: a display whose one MIME type is ``image/png``, which nbval leaves out of every
comparison. The bar is redrawn in place (one display, updated), and it ends full, so the
stored picture is the same bytes every run. Its numbers belong in the cell's own compared
output (a count of what was done), not in the bar.

The PNG is written by hand (zlib and a few bytes of header): a bar needs no plotting library,
and an update costs microseconds, not the tens of milliseconds a figure would.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import TypeVar

_WIDTH, _HEIGHT = 320, 12
_DONE, _LEFT, _EDGE = (0x2E, 0x7D, 0x32), (0xE0, 0xE0, 0xE0), (0x9E, 0x9E, 0x9E)

T = TypeVar("T")


def bar_png(done: int, total: int) -> bytes:
    """A PNG of a horizontal bar ``done / total`` full (green on grey, a grey frame)."""
    filled = 0 if total <= 0 else round((_WIDTH - 2) * min(done, total) / total)
    rows = []
    for y in range(_HEIGHT):
        if y in (0, _HEIGHT - 1):
            pixels = [_EDGE] * _WIDTH
        else:
            pixels = [_EDGE] + [_DONE] * filled + [_LEFT] * (_WIDTH - 2 - filled) + [_EDGE]
        rows.append(b"\x00" + bytes(channel for pixel in pixels for channel in pixel))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", _WIDTH, _HEIGHT, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")


class Progress:
    """One bar in the running cell; :meth:`step` moves it. Outside a notebook it shows nothing."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self._handle = None
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # pragma: no cover - IPython comes with the lab
            return
        if get_ipython() is not None:
            self._handle = display({"image/png": bar_png(0, total)}, raw=True, display_id=True)

    def step(self, count: int = 1) -> None:
        self.done += count
        if self._handle is not None:
            self._handle.update({"image/png": bar_png(self.done, self.total)}, raw=True)

    def to(self, done: int) -> None:
        """Show ``done`` of the total (a count that arrives from elsewhere, not one step at a time)."""
        if done != self.done:
            self.step(done - self.done)

    def finish(self) -> None:
        """Fill the bar, whatever was counted, so the stored picture is the same every run."""
        self.done = self.total
        if self._handle is not None:
            self._handle.update({"image/png": bar_png(self.total, self.total)}, raw=True)


def with_progress(items: Iterable[T], total: int | None = None) -> Iterator[T]:
    """Yield ``items`` one by one, moving a bar after each; the bar is full when they run out."""
    listed = list(items) if total is None else items
    bar = Progress(len(listed) if total is None else total)  # type: ignore[arg-type]
    try:
        for item in listed:
            yield item
            bar.step()
    finally:
        bar.finish()
