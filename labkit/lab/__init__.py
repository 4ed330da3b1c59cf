"""What exists only to teach or measure, apart from the workflow itself.

The lessons' exercises and their checks, the crash explorer, the deliberately broken
variants (``naive``), the incident catalogue, a lesson's workspace and its pandas frames,
the capacity model, the benchmark and the child-process helpers. The core and the
mechanisms never import from here (tests/test_layout.py reads the imports to make sure);
this package may import anything.
"""

import importlib


def __getattr__(name: str):
    # A submodule not imported yet (``labkit.lab.display.runs_frame`` after ``import labkit``).
    if not name.startswith("_"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":  # the submodule exists; something it needs does not
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
