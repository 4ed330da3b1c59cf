#!/usr/bin/env bash
# Run a command with CPU burners beside it, as on a shared CI machine: BURNERS busy processes
# (default three per core), stopped when the command ends, whatever way it ends. Prints the
# command's time and the load average it ran under, and exits with the command's status.
set -u
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
burners=${BURNERS:-$(( 3 * cores ))}
pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$burners"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
start=$(date +%s)
"$@"
status=$?
echo "under load: $burners CPU burners on $cores cores; $(( $(date +%s) - start )) s;" \
     "load average (1, 5, 15 min) $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
