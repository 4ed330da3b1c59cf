#!/usr/bin/env bash
# The lessons on the other Pythons the lab supports: for each of PYTHONS (default "3.12 3.13") that this
# machine has (python3.X on PATH, or pyenv's ~/.pyenv/versions/3.X.*), a venv in .venv/other/3.X with
# requirements.txt, then strict nbval over the lessons (LESSONS: a glob under notebooks/, default every
# lesson). A lesson that needs a SQLite feature this Python's SQLite lacks (labkit.lab.sqlite_check; e.g.
# lesson 14 on Python 3.12+ with SQLite before 3.42) is reported as SKIPPED with its one-line reason, and
# 00_setup_check, which checks every feature, too; every other lesson must pass. A Python not found is
# reported and skipped; with none found the script fails (nothing was tested). The Pythons run at once, each
# writing to a log of its own that is printed when all have ended: one strict nbval session keeps about one
# core busy, so on two cores two Pythons take little longer than one (measured: 192 s wall, 207 CPU-s).
#   bash scripts/other_pythons.sh                         (make test-other-pythons)
#   PYTHONS=3.13 LESSONS="0[0-3]_*" bash scripts/other_pythons.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHONS=${PYTHONS:-3.12 3.13}
LESSONS=${LESSONS:-[0-9]*}
out=$(mktemp -d "${TMPDIR:-/tmp}/other-pythons.XXXXXX")
trap 'rm -rf "$out"' EXIT
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM

# The interpreter itself (sys.executable), not a launcher such as pyenv's shims, and only if it is 3.X.
find_python() {
    local version=$1 found
    for found in $(command -v "python$version" 2>/dev/null) "$HOME"/.pyenv/versions/"$version".*/bin/python; do
        [ -x "$found" ] || continue
        "$found" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$version'.split('.'))))" 2>/dev/null \
            && { "$found" -c "import sys; print(sys.executable)"; return; }
    done
    return 1
}

# One Python, start to end: its output goes to $out/VERSION.log, its one-line summary to
# $out/VERSION.summary, and its outcome (absent, passed or failed) to $out/VERSION.outcome.
one_python() {
    local version=$1 python venv stamp started installed full notebook name lesson ask reason verdict
    local summary=$out/$version.summary outcome=$out/$version.outcome
    if ! python=$(find_python "$version"); then
        echo "Python $version: not on this machine (no python$version, no ~/.pyenv/versions/$version.*): skipped" > "$summary"
        echo absent > "$outcome"; return
    fi
    venv=.venv/other/$version
    stamp=$venv/.installed
    started=$(date +%s)
    # Made again when requirements.txt or pyproject.toml changed, or from another interpreter.
    if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
       || [ "$(cat "$stamp" 2>/dev/null)" != "$python" ]; then
        rm -rf "$venv"
        "$python" -m venv "$venv" || { echo "Python $version: venv failed" > "$summary"; echo failed > "$outcome"; return; }
        if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt 2>&1 \
             | grep -v "^WARNING: Location"; then :; fi
        if ! "$venv/bin/python" -c "import labkit, dbos, nbval" 2>/dev/null; then
            echo "Python $version ($python): pip install -r requirements.txt failed" > "$summary"
            echo failed > "$outcome"; return
        fi
        echo "$python" > "$stamp"
    fi
    installed=$(( $(date +%s) - started ))
    full=$("$venv/bin/python" -c "import sys, sqlite3; print(sys.version.split()[0], 'with SQLite', sqlite3.sqlite_version)")
    local run=() skipped=0
    for notebook in notebooks/$LESSONS.ipynb; do
        [ -f "$notebook" ] || continue
        name=$(basename "$notebook" .ipynb)
        lesson=${name%%_*}
        if [ "$lesson" = "00" ]; then ask=""; else ask=$lesson; fi  # 00_setup_check checks every feature
        if reason=$("$venv/bin/python" -m labkit.lab.sqlite_check $ask 2>&1); then
            run+=("$notebook")
        else
            echo "SKIPPED $name on Python $full: $(echo "$reason" | head -1)"
            skipped=$((skipped + 1))
        fi
    done
    # labkit's bytecode for this Python, written ahead as the Makefile does (with PYTHONDONTWRITEBYTECODE
    # set, every child would compile labkit's sources again).
    "$venv/bin/python" -m compileall -q labkit >/dev/null || true
    started=$(date +%s)
    echo passed > "$outcome"
    if [ ${#run[@]} -gt 0 ]; then
        echo "== Python $full: strict nbval over ${#run[@]} lessons"
        if "$venv/bin/python" -m pytest "${run[@]}" -n 0 -q -p no:cacheprovider; then verdict=passed
        else verdict=FAILED; echo failed > "$outcome"; fi
    else
        verdict="nothing to run"
    fi
    echo "Python $full: ${#run[@]} lessons $verdict, $skipped skipped (SQLite features); install ${installed} s, lessons $(( $(date +%s) - started )) s" > "$summary"
}

for version in $PYTHONS; do
    one_python "$version" > "$out/$version.log" 2>&1 &
done
wait

status=0
tested=0
for version in $PYTHONS; do
    cat "$out/$version.log"
done
echo "== other Pythons"
for version in $PYTHONS; do
    cat "$out/$version.summary" 2>/dev/null || echo "Python $version: ended without a summary (see its log above)"
    case $(cat "$out/$version.outcome" 2>/dev/null) in
        passed) tested=$((tested + 1)) ;;
        failed) tested=$((tested + 1)); status=1 ;;
        absent) ;;
        *) status=1 ;;
    esac
done
if [ "$tested" -eq 0 ]; then
    echo "no other Python found: nothing was tested"
    exit 1
fi
exit $status
