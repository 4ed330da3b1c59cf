import sys

# jsonschema imports rfc3987_syntax, when installed (JupyterLab's dependencies bring it),
# only to check the "iri" format, and that import compiles ~35 parsers: about a second of
# start-up for every `python -m labkit` child process. The evidence contract uses no
# formats, so this process lets that optional import fail (python-jsonschema/jsonschema#1428).
# Done here, in the command-line entry point only, so importing labkit elsewhere (a notebook
# kernel) changes nothing in jsonschema.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]  # None makes the import fail

from .cli import main  # noqa: E402

sys.exit(main())
