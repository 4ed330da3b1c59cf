"""labkit: a teaching kit for durable, restart-safe incident workflows on SQLite.

Three layers, imports one way (tests/docs/test_layout.py reads them to make sure):

- **the core**, the lab's source design: the coordinator (a versioned state machine), the read
  adapter and its evidence contract, the SQLite checkpoint store, the receipt table, the
  recovery worker, crash points, invariants and ``status``. Its public names are below, as
  ``labkit.NAME``; labkit/README.md lists its modules in reading order.
- **the mechanisms** of lessons 08-13, each reached through its module: ``labkit.versioning``,
  ``labkit.effects`` (``Tickets``), ``labkit.ticket_client``, ``labkit.leases``,
  ``labkit.worker``, ``labkit.pool``, ``labkit.retention``, ``labkit.evaluation``.
- **labkit.lab**: what exists only to teach or measure (a lesson's workspace, child processes
  to kill, the crash explorer, the exercises, the ticket service, the benchmark), and
  ``labkit.engines``: the same workflow on other engines.

Every error is a :class:`labkit.errors.LabError`: ``labkit.errors.BadInput`` (exit 2) or
``labkit.errors.RunFailure`` (exit 1).
"""


import importlib

__version__ = "0.1.0"

# The core's public names, by the module that defines it. Nothing is imported until a name is first
# used (PEP 562): ``python -m labkit`` then imports only what its command needs, and a Ctrl-C
# during those imports lands inside the entry point's handler (labkit/__main__.py), not in a
# traceback from this file.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "steps": ("Step",),
    "clock": ("ManualClock", "SystemClock", "TickingClock"),
    "coordinator": ("WORKFLOW_VERSION", "Coordinator", "DriveResult"),
    "provider": ("CallLog", "ReadAdapter", "Reading", "ReferenceProvider", "call_log_for", "list_incidents"),
    "contract": ("CONTRACT", "check_evidence"),
    "store": ("Evidence", "Run", "connect", "connect_readonly"),
    "database": ("read_transaction", "transaction"),
    "receipts": ("Receipt",),
    "recovery": ("Resumed", "recover"),
    "crashpoints": ("BETWEEN_READ_AND_COMMIT", "CRASH_POINTS", "RUN_POINTS", "CrashPlan", "CrashPoint"),
    "invariants": ("check_invariants",),
    "status": ("status_of",),
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}


def lazy_names(package: str, names: dict[str, tuple[str, ...]], namespace: dict) -> tuple:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562) that import each name on first use.

    ``names`` lists the public names by the submodule that defines them; any other attribute
    is tried as a submodule not imported yet (``labkit.leases.FENCE`` after ``import labkit``).
    labkit and labkit.lab both use it.
    """
    module_of = {name: module for module, found in names.items() for name in found}

    def __getattr__(name: str):
        module = module_of.get(name)
        if module is not None:
            value = getattr(importlib.import_module(f".{module}", package), name)
            namespace[name] = value  # found once; later look-ups never reach this function
            return value
        if not name.startswith("_"):
            try:
                return importlib.import_module(f".{name}", package)
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":  # the submodule exists; something it needs does not
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(module_of))

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals())
__all__ = sorted(_MODULE_OF)
