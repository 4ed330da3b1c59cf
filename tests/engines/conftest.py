"""What the engine tests share: one Temporal dev server per test module."""

from __future__ import annotations

import os

import pytest

from labkit.engines.temporal import ADDRESS_ENV
from labkit.lab.temporal_server import TemporalServer


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory):
    """A dev server for the module (127.0.0.1, its own SQLite file; a start takes a second or two).

    Its address goes in ADDRESS_ENV, where forked workers and the explorer look for it, and the
    variable is put back as it was afterwards.
    """
    before = os.environ.get(ADDRESS_ENV)
    with TemporalServer(tmp_path_factory.mktemp("temporal") / "temporal.sqlite") as started:
        os.environ[ADDRESS_ENV] = started.address
        try:
            yield started
        finally:
            if before is None:
                del os.environ[ADDRESS_ENV]
            else:
                os.environ[ADDRESS_ENV] = before
