#!/usr/bin/env bash
# Prove that wheelhouse/ is enough to install and test the lab with the network OFF.
#
#     scripts/wheelhouse.sh        # first, with the network
#     scripts/offline_check.sh [PYTEST ARGS ...]
#
# Inside a new network namespace that has only loopback (`unshare -n`; loopback is brought up
# because Jupyter kernels talk to their client over 127.0.0.1), it
#   1. shows that the network is really off: connecting to pypi.org:443 and 8.8.8.8:53 fails;
#   2. makes a fresh venv under $TMPDIR and installs requirements.txt into it from wheelhouse/
#      only (`pip install --no-index --find-links wheelhouse`, with every pip setting of this
#      machine set aside, so that no other index, mirror or folder of wheels can help);
#   3. runs the test suite (`python -m pytest -q`) from the repository root with that venv.
# Making a network namespace needs root (CI runs as root). PYTHON picks the interpreter that makes
# the venv (default python3); KEEP=1 keeps the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)
python=$(command -v "${PYTHON:-python3}") || { echo "offline_check: no ${PYTHON:-python3} on PATH" >&2; exit 2; }

if ! ls wheelhouse/*.whl >/dev/null 2>&1; then
    echo "offline_check: wheelhouse/ holds no wheels; run scripts/wheelhouse.sh first, with the network" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v ip >/dev/null || ! unshare -n true 2>/dev/null; then
    echo "offline_check: cannot make a network namespace here: it needs root, unshare (util-linux) and ip" >&2
    echo "  (iproute2), and a machine that allows unshare -n. Nothing was checked. CI runs it as root." >&2
    exit 3
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/labkit-offline.XXXXXX")
cleanup() {
    if [ -n "${KEEP:-}" ]; then echo "kept the venv: $work/venv"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Set aside every pip setting of this machine (config files, PIP_* variables): only wheelhouse/ counts.
while IFS='=' read -r name _; do
    case "$name" in PIP_*) unset "$name" ;; esac
done < <(env)
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
export OFFLINE_ROOT=$root OFFLINE_VENV=$work/venv OFFLINE_PYTHON=$python

start=$(date +%s)
status=0
unshare -n bash -euo pipefail -c '
    ip link set lo up
    echo "== network interfaces in this namespace:"; ip -brief link
    "$OFFLINE_PYTHON" - <<\EOF
import socket
for host, port in (("pypi.org", 443), ("8.8.8.8", 53)):
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as error:
        print(f"== no network: {host}:{port} -> {error}")
    else:
        raise SystemExit(f"offline_check: connected to {host}:{port}, so the network is NOT off; stopping")
with socket.create_server(("127.0.0.1", 0)) as server:  # loopback, which Jupyter kernels need, works
    socket.create_connection(server.getsockname(), timeout=5).close()
print("== loopback: up")
EOF
    cd "$OFFLINE_ROOT"
    began=$(date +%s)
    "$OFFLINE_PYTHON" -m venv "$OFFLINE_VENV"
    "$OFFLINE_VENV/bin/python" -m pip install --quiet --no-cache-dir --no-index --find-links wheelhouse -r requirements.txt
    echo "== installed requirements.txt from wheelhouse/ with no network in $(( $(date +%s) - began )) s"
    "$OFFLINE_VENV/bin/python" -m pytest -q "$@"
' offline-check "$@" || status=$?
echo "offline_check: install and python -m pytest with no network took $(( $(date +%s) - start )) s (exit $status)"
exit "$status"
