"""What exists only to teach or measure, apart from the workflow itself.

A lesson's workspace (``workspace``, ``lesson``) and its pandas frames (``display``); child
processes a lesson kills, pauses or races (``processes``); the deliberately broken variants
(``naive``); the crash explorer (``explorer``); the exercises and their checks
(``exercises``); the incident catalogue (``catalogue``); the ticket service, "the outside
world" (``ticket_service``); the capacity model, the benchmark and the lock measurements
(``capacity``, ``bench``, ``locks``, ``races``); two DBOS workers on PostgreSQL
(``postgres_workers``). The core and the mechanisms never import from here
(tests/docs/test_layout.py reads the imports to make sure); this package may import anything.

The names a lesson uses most are here, as ``labkit.lab.NAME``; the rest through their module.
"""

import importlib

# The lessons' helpers, by the module that defines them; imported on first use, as in labkit.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "workspace": ("Workspace",),
    "processes": ("PausedRun", "labkit_cli", "race", "run_in_child"),
    "explorer": ("Exploration", "explore", "random_kills"),
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # found once; later look-ups never reach this function
        return value
    # A submodule not imported yet (``labkit.lab.display.runs_frame`` after ``import labkit``).
    if not name.startswith("_"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":  # the submodule exists; something it needs does not
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


__all__ = sorted(_MODULE_OF)
