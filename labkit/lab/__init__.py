"""What exists only to teach or measure, apart from the workflow itself.

A lesson's workspace (``workspace``, ``lesson``) and its pandas frames (``display``); child
processes a lesson kills, pauses or races (``processes``); the deliberately broken variants
(``naive``); the crash explorer (``explorer``); the exercises and their checks
(``exercises``); the incident catalogue (``catalogue``); the ticket service, "the outside
world" (``ticket_service``); the capacity model, the benchmark and the lock measurements
(``capacity``, ``bench``, ``locks``, ``races``); two DBOS workers on PostgreSQL
(``postgres_workers``); a live RabbitMQ for lesson 07 (``live_broker``). The core and the mechanisms never import from here
(tests/docs/test_layout.py reads the imports to make sure); this package may import anything.

The names a lesson uses most are here, as ``labkit.lab.NAME``; the rest through their module.
"""

from .. import lazy_names

# The lessons' helpers, by the module that defines them; imported on first use, as in labkit.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "workspace": ("Workspace",),
    "processes": ("PausedRun", "labkit_cli", "race", "run_in_child"),
    "explorer": ("Exploration", "explore", "random_kills"),
}
__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals())
__all__ = sorted(name for names in _PUBLIC.values() for name in names)
