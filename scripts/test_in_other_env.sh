#!/usr/bin/env bash
# Run the README's test command from a Python environment OUTSIDE this repository.
#
#     scripts/test_in_other_env.sh [PYTEST ARGS ...]
#
# Makes a fresh venv under $TMPDIR (default /tmp), installs requirements-dev.txt (the learner's
# requirements.txt and the developers' tools the tests use) into it from the
# repository root, as a learner does in a conda environment, a JupyterHub image or on Binder, and
# runs `python -m pytest` from the repository root with that interpreter: unit tests, the crash
# suite and strict nbval over every notebook, 00_setup_check included. It shows that nothing in the
# lab needs the project's own .venv. The venv is removed at the end (KEEP=1 keeps it and says where).
# PYTHON picks the interpreter that makes the venv (default python3; the lab needs 3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)
python=${PYTHON:-python3}

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "test_in_other_env: $python is older than Python 3.11; set PYTHON=python3.11" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/labkit-other-env.XXXXXX")
work=$(cd "$work" && pwd -P)
case "$work/" in
    "$root"/*) echo "test_in_other_env: $work is inside the repository; point TMPDIR elsewhere" >&2; exit 2 ;;
esac
cleanup() {
    if [ -n "${KEEP:-}" ]; then echo "kept the venv: $work/venv"; else rm -rf "$work"; fi
}
trap cleanup EXIT

venv=$work/venv
start=$(date +%s)
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
echo "installed requirements-dev.txt into a venv outside the repository in $(( $(date +%s) - start )) s"
"$venv/bin/python" -c 'import sys; print("interpreter:", sys.executable)'

start=$(date +%s)
status=0
"$venv/bin/python" -m compileall -q labkit >/dev/null || true  # labkit's bytecode, as the Makefile writes it
"$venv/bin/python" -m pytest "$@" || status=$?
echo "python -m pytest from the other environment took $(( $(date +%s) - start )) s (exit $status)"
exit "$status"
