#!/usr/bin/env bash
# Make the lab's venv with a Python the pins allow, before anything is installed into it.
#
#     PYTHON=python3.11 scripts/ensure_venv.sh [VENV]       (the Makefile runs it; VENV defaults to .venv)
#     PYTHON=python3.10 scripts/ensure_venv.sh --check      only the check: its one line, on stderr
#
# The pins need Python 3.11 or newer (pandas 3.1.1, numpy 2.4.6, ipykernel 7.4.0, matplotlib 3.11.2 ...:
# the highest Requires-Python among them is >=3.11). With an older PYTHON, or none, it prints ONE line
# naming the Python found and the one needed and exits 2, before any venv is made. A venv of another
# Python than PYTHON's (a 3.10 venv left by an earlier attempt, or PYTHON changed) is replaced, not
# reused, so `make lab PYTHON=python3.11` after a failed attempt works without `make clean`.
set -euo pipefail
check_only=
if [ "${1:-}" = --check ]; then check_only=1; shift; fi
venv=${1:-.venv}
python=${PYTHON:-python3}
need_major=3
need_minor=11

version_of() {  # "3.11.7" from `python --version` ("Python 3.11.7"); empty if it does not run
    "$1" --version 2>&1 | sed -n 's/^Python \([0-9][0-9]*\.[0-9][0-9]*[.0-9a-z+]*\).*/\1/p' | head -n 1
}

found=$(version_of "$python" 2>/dev/null || true)
if [ -z "$found" ]; then
    echo "Python: '$python' not found (or not a Python); the lab needs Python $need_major.$need_minor or newer: make lab PYTHON=python3.11" >&2
    exit 2
fi
major=${found%%.*}
rest=${found#*.}
minor=${rest%%.*}
if [ "$major" -lt "$need_major" ] || { [ "$major" -eq "$need_major" ] && [ "$minor" -lt "$need_minor" ]; }; then
    echo "Python: '$python' is Python $found; the lab needs Python $need_major.$need_minor or newer (3.11, 3.12, 3.13): make lab PYTHON=python3.11" >&2
    exit 2
fi
[ -z "$check_only" ] || exit 0

if [ -e "$venv" ]; then
    had=$( [ -x "$venv/bin/python" ] && version_of "$venv/bin/python" 2>/dev/null || true)
    if [ "$had" != "$found" ]; then
        echo "Python: $venv is Python ${had:-unknown}, not $python's $found: replacing it"
        rm -rf "$venv"
    fi
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
