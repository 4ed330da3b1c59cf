"""One workflow, several engines: what the contract suite, the crash explorer and 14_choosing_an_engine drive.

An engine here is whatever runs the incident workflow and brings it back after a death, one
class per engine behind one interface (:class:`Engine`, in :mod:`labkit.engines.base`):

- ``labkit`` (:class:`~labkit.engines.labkit.LabkitEngine`): the coordinator of this package, its
  state rows and ``python -m labkit recover``;
- ``dbos`` (:class:`~labkit.engines.dbos.DbosEngine`): the same workflow written for DBOS Transact,
  recovered by ``DBOS.launch()``; its system database in SQLite beside the run, or on the
  PostgreSQL server that ``system_url`` names (:mod:`labkit.lab.postgres_workers` runs two
  workers on one);
- ``temporal`` (:class:`~labkit.engines.temporal.TemporalEngine`): the same workflow as a Temporal
  workflow with activities, on a dev server (:mod:`labkit.lab.temporal_server`), its worker
  started again after a kill.
- ``langgraph`` (:class:`~labkit.engines.langgraph.LangGraphEngine`): the same workflow as a
  LangGraph graph on its SQLite checkpointer, resumed by thread id.

What differs is said in each engine's class and nowhere else: how to drive and recover a run,
and which crash points lose a read the provider already served (each engine records a read at a
different moment). This package imports nothing of the lessons' machinery: the explorer picks an
engine from here, never the other way round.
"""

from __future__ import annotations

from ..errors import BadInput
from .base import INCIDENT, Engine, expected_reads, provider_for
from .dbos import DbosEngine
from .labkit import LabkitEngine
from .langgraph import LangGraphEngine
from .temporal import TemporalEngine

#: Every engine, by the name ``explore --engine NAME`` takes.
ENGINES: dict[str, type[Engine]] = {kind.name: kind for kind in (LabkitEngine, DbosEngine, TemporalEngine, LangGraphEngine)}


class UnknownEngine(BadInput):
    def __init__(self, name: str):
        super().__init__(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


def engine(name: str, *, system_url: str | None = None, bug: str | None = None) -> Engine:
    """The engine called ``name``; ``system_url`` puts DBOS's system database on a PostgreSQL server.

    ``bug`` switches on one of labkit's deliberately broken coordinators (the explorer's ``--bug``).
    Each engine refuses the option it has no use for.
    """
    kind = ENGINES.get(name)
    if kind is None:
        raise UnknownEngine(name)
    return kind.configured(system_url=system_url, bug=bug)


__all__ = ["ENGINES", "INCIDENT", "DbosEngine", "Engine", "LabkitEngine", "LangGraphEngine", "TemporalEngine", "UnknownEngine", "engine",
           "expected_reads",
           "provider_for"]
