#!/usr/bin/env bash
# A throwaway RabbitMQ node on 127.0.0.1, with the management plugin, for the real read adapter's tests and the
# broker situations script (make test-broker).
#
#   bash scripts/rabbitmq.sh start        start it; prints the management URL to set as LABKIT_RABBITMQ_URL (and
#                                         nothing else on standard output, so `url=$(bash scripts/rabbitmq.sh start)`)
#   bash scripts/rabbitmq.sh stop         stop it and the epmd it started, and delete its folder
#   bash scripts/rabbitmq.sh ctl ARGS...  rabbitmqctl against it (the alarms of scripts/broker_situations.py)
#   bash scripts/rabbitmq.sh amqp-port    the AMQP port it listens on
#   bash scripts/rabbitmq.sh start-second a second node, labkit2@localhost, joined to the first in a cluster (the
#                                         first's Erlang cookie and epmd, ports of its own): cluster-node-stopped
#   bash scripts/rabbitmq.sh ctl-second ARGS...  rabbitmqctl against the second node (stop_app)
#   bash scripts/rabbitmq.sh amqp-port-second    the AMQP port the second node listens on
#   bash scripts/rabbitmq.sh stop-second  stop the second node, have the first forget it, delete its folder
#                                         (`stop` does this first whenever a second node is recorded)
#
# Without RabbitMQ it installs Debian's `rabbitmq-server` package (needs root and apt), telling the package not
# to start a node of its own (policy-rc.d), so the only node this script leaves running is the one `start` made.
# The node runs as the current user, with its data, logs, Erlang cookie and config in one folder under /tmp.
# Everything listens on 127.0.0.1 only, each on a free port: AMQP, the management HTTP API, epmd (its own, on a
# port of its own, so stopping it never touches another epmd) and Erlang distribution, the CLI tools' included.
# The management user is made for this node with a random password; the password is in the printed URL only.
set -euo pipefail
cd "$(dirname "$0")/.."

# The running node's folder, ports, name and URL, for `stop` and `ctl`; LABKIT_RABBITMQ_STATE puts it elsewhere
# (lesson 07's node keeps its own, so it never meets the one `make test-broker` starts).
STATE=${LABKIT_RABBITMQ_STATE:-build/rabbitmq.state}
SECOND_STATE="$STATE.second"
SECOND_NAME="labkit2@localhost"
RABBIT_BIN=/usr/lib/rabbitmq/bin   # the package's scripts as they are: /usr/sbin's wrappers switch to its user

say() { echo "rabbitmq.sh: $*" >&2; }

install_server() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "no RabbitMQ server found ($RABBIT_BIN/rabbitmq-server), and cannot install it here (needs root and apt-get)."
        say "install rabbitmq-server, or point the lab at your own broker: LABKIT_RABBITMQ_URL=http://user:pass@host:15672"
        exit 1
    fi
    # Debian's package would start a node of its own on every interface, outliving this test: a policy-rc.d
    # that says no for the length of the install (one already there, as in containers, is left as it is).
    local policy=/usr/sbin/policy-rc.d made_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; made_policy=1
    fi
    say "installing Debian's rabbitmq-server package"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null || { [ -n "$made_policy" ] && rm -f "$policy"; exit 1; }
    if [ -n "$made_policy" ]; then rm -f "$policy"; fi
}

answers() {
    # Whether the management API answers 200 to user $2 with password $3 (Python's urllib: curl may be missing).
    # The password goes through the environment, not the command line that `ps` shows.
    ANSWERS_PASSWORD="$3" python3 - "$1" "$2" <<'PY' >/dev/null 2>&1
import base64, os, sys, urllib.request
url, user, password = sys.argv[1], sys.argv[2], os.environ["ANSWERS_PASSWORD"]
request = urllib.request.Request(url, headers={"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()})
with urllib.request.urlopen(request, timeout=2) as reply:
    sys.exit(0 if reply.status == 200 else 1)
PY
}

start_lock() {
    # One start at a time on this machine (util-linux's flock, where there is one): a start picks ports that are free
    # now and the node listens on them seconds later, so two starts at once (lesson 07 under nbval beside make
    # test-broker, two mutant runs of 07) could pick the same ones. Released when this script exits; the node is
    # started with the lock's descriptor closed, so it never holds the lock itself.
    command -v flock >/dev/null || return 0
    exec 9>"${TMPDIR:-/tmp}/labkit-rabbitmq.start.lock"
    flock -w 300 9 || { say "another start kept the start lock for 300 s"; exit 1; }
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
    # The first port from $1 on that nothing listens on and that no earlier pick in this start took.
    local port=$1 tries=0
    while port_taken "$port" || [[ " ${PICKED:-} " == *" $port "* ]]; do
        port=$((port + 1)); tries=$((tries + 1))
        if [ "$tries" -ge 100 ]; then say "no free port from $1 to $port"; exit 1; fi
    done
    echo "$port"
}

node_env() {
    # The environment every RabbitMQ and Erlang command of this node runs with (the server, rabbitmqctl, epmd).
    export HOME="$NODE_DIR/home"   # the Erlang cookie lives in $HOME
    export RABBITMQ_CONF_ENV_FILE="$NODE_DIR/rabbitmq-env.conf"   # ours, empty: not the package's /etc one
    export RABBITMQ_CONFIG_FILE="$NODE_DIR/rabbitmq.conf"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$NODE_DIR/advanced.config"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$NODE_DIR/enabled_plugins"
    export RABBITMQ_MNESIA_BASE="$NODE_DIR/mnesia" RABBITMQ_LOG_BASE="$NODE_DIR/log"
    export RABBITMQ_PID_FILE="$NODE_DIR/rabbit.pid" ERL_CRASH_DUMP="$NODE_DIR/erl_crash.dump"   # not the working folder
    export RABBITMQ_NODENAME="$NODE_NAME" RABBITMQ_USE_LONGNAME=false
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$AMQP_PORT" RABBITMQ_DIST_PORT="$DIST_PORT"
    export ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$EPMD_PORT"
    # Erlang distribution on loopback, for the node and for each CLI tool's own short-lived node.
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

running() {
    [ -f "$STATE" ] || return 1
    # shellcheck disable=SC1090
    . "$STATE"
    [ -f "$NODE_DIR/rabbit.pid" ] && kill -0 "$(cat "$NODE_DIR/rabbit.pid")" 2>/dev/null
}

start() {
    if running; then
        say "a node started by this script is already running ($NODE_NAME); run 'bash scripts/rabbitmq.sh stop' first"
        exit 1
    fi
    [ -f "$STATE" ] && stop   # a state file left by a node that is gone: clear what remains of it
    start_lock
    [ -x "$RABBIT_BIN/rabbitmq-server" ] || install_server
    [ -x "$RABBIT_BIN/rabbitmq-server" ] || { say "the rabbitmq-server package installed no $RABBIT_BIN/rabbitmq-server"; exit 1; }
    # Free ports from a random block of ten (LABKIT_RABBITMQ_PORT picks the first): two nodes starting at once
    # (lesson 07 under nbval beside make test-broker, or two mutant runs of it) would otherwise both find the same
    # ports free and one would fail to listen; the second node's ports follow the first's. The blocks lie below the
    # kernel's ephemeral range: a port in it that is free when we look can be handed, before the node listens, to
    # any outgoing connection or bind to port 0 on the machine (make test makes hundreds: Temporal's server, the
    # ticket services, the engines' clients).
    local ephemeral_low=32768 blocks
    read -r ephemeral_low _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    blocks=$(( (ephemeral_low - 10000 - 20) / 10 ))
    [ "$blocks" -ge 100 ] || blocks=100   # an unusual range reaching down near 10000: share it rather than fail
    local first=${LABKIT_RABBITMQ_PORT:-$((10000 + (RANDOM % blocks) * 10))}
    PICKED=""
    AMQP_PORT=$(free_port "$first"); PICKED="$PICKED $AMQP_PORT"
    MGMT_PORT=$(free_port $((AMQP_PORT + 1))); PICKED="$PICKED $MGMT_PORT"
    EPMD_PORT=$(free_port $((MGMT_PORT + 1))); PICKED="$PICKED $EPMD_PORT"
    DIST_PORT=$(free_port $((EPMD_PORT + 1)))
    NODE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/labkit-rabbitmq.XXXXXX")
    # One name for every node this script starts: each has an epmd of its own, so two never meet, and the
    # captures of scripts/broker_situations.py name the same node and cluster on every machine.
    NODE_NAME="labkit@localhost"
    local password
    password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    URL="http://labkit:$password@127.0.0.1:$MGMT_PORT"
    mkdir -p "$(dirname "$STATE")" "$NODE_DIR/home" "$NODE_DIR/mnesia" "$NODE_DIR/log"
    chmod 700 "$NODE_DIR"
    printf 'NODE_DIR=%q\nNODE_NAME=%q\nAMQP_PORT=%q\nMGMT_PORT=%q\nEPMD_PORT=%q\nDIST_PORT=%q\nURL=%q\n' \
        "$NODE_DIR" "$NODE_NAME" "$AMQP_PORT" "$MGMT_PORT" "$EPMD_PORT" "$DIST_PORT" "$URL" > "$STATE"
    chmod 600 "$STATE"
    : > "$NODE_DIR/rabbitmq-env.conf"
    echo "[rabbitmq_management]." > "$NODE_DIR/enabled_plugins"
    echo "[]." > "$NODE_DIR/advanced.config"
    # The user is made on first boot from default_user/default_pass; guest is not made at all.
    cat > "$NODE_DIR/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
default_user = labkit
default_pass = $password
default_user_tags.administrator = true
cluster_name = labkit
log.console = false
log.file.level = warning
EOF
    node_env
    "$RABBIT_BIN/rabbitmq-server" -detached >/dev/null 2>&1 9>&- || true
    # Ready when the management API answers as our user (the node boots in 4-5 s on an idle machine, 15-45 s beside
    # make test and CPU burners). A node whose process ended (a port another program took between our check and its
    # listen) is started again on a new random block, twice at most; one that neither answers nor ends within
    # LABKIT_RABBITMQ_BOOT_SECONDS (120) is given up.
    local boot_seconds=${LABKIT_RABBITMQ_BOOT_SECONDS:-120}
    local deadline=$((SECONDS + boot_seconds)) attempt=${LABKIT_RABBITMQ_ATTEMPT:-1}
    until answers "http://127.0.0.1:$MGMT_PORT/api/overview" "labkit" "$password"; do
        local gone=""
        if [ -f "$NODE_DIR/rabbit.pid" ] && ! kill -0 "$(cat "$NODE_DIR/rabbit.pid")" 2>/dev/null; then gone=1; fi
        if [ -n "$gone" ] || [ "$SECONDS" -ge "$deadline" ]; then
            if [ -n "$gone" ]; then say "the node ended while starting (attempt $attempt); its log:"
            else say "the node did not answer on its management port within $boot_seconds s (attempt $attempt); its log:"; fi
            tail -n 20 "$NODE_DIR"/log/*.log >&2 2>/dev/null || true
            stop
            if [ -n "$gone" ] && [ "$attempt" -lt 3 ] && [ -z "${LABKIT_RABBITMQ_PORT:-}" ]; then
                LABKIT_RABBITMQ_ATTEMPT=$((attempt + 1)) start
                return
            fi
            exit 1
        fi
        sleep 0.5
    done
    say "RabbitMQ $(ls /usr/lib/rabbitmq/lib | sed -n 's/^rabbitmq_server-//p' | head -n 1) node $NODE_NAME: AMQP 127.0.0.1:$AMQP_PORT, management 127.0.0.1:$MGMT_PORT, epmd 127.0.0.1:$EPMD_PORT, data in $NODE_DIR"
    echo "$URL"
}

ctl() {
    running || { say "no node started by this script is running"; exit 1; }
    node_env
    "$RABBIT_BIN/rabbitmqctl" -n "$NODE_NAME" "$@"
}

stop() {
    if [ -f "$SECOND_STATE" ]; then stop_second; fi
    if [ ! -f "$STATE" ]; then say "no node started by this script is recorded ($STATE); nothing to stop"; return 0; fi
    # shellcheck disable=SC1090
    . "$STATE"
    node_env
    if [ -f "$NODE_DIR/rabbit.pid" ]; then
        local pid
        pid=$(cat "$NODE_DIR/rabbit.pid")
        timeout 60 "$RABBIT_BIN/rabbitmqctl" -n "$NODE_NAME" stop >/dev/null 2>&1 || true
        # rabbitmqctl returns while the node is still going down: wait for the process itself (30 s), then
        # end that one process, by its id.
        local waited=0
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 60 ]; do sleep 0.5; waited=$((waited + 1)); done
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    # Our epmd, on its own port: only it, never another on the machine's default port. It refuses to die while a
    # node is still registered (one that just went down may be for a moment), so ask again, then end the process
    # that listens on our port, by its id.
    local tries=0
    while epmd -port "$EPMD_PORT" -names >/dev/null 2>&1 && [ "$tries" -lt 20 ]; do
        epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
        sleep 0.25; tries=$((tries + 1))
    done
    local epmd_pid
    for epmd_pid in $(ss -ltnpH "sport = :$EPMD_PORT" 2>/dev/null | grep -o 'epmd",pid=[0-9]*' | cut -d= -f2 | sort -u); do
        kill -KILL "$epmd_pid" 2>/dev/null || true
    done
    case "$NODE_DIR" in
        */labkit-rabbitmq.*) rm -rf "$NODE_DIR" ;;   # only a folder this script made
    esac
    rm -f "$STATE"
    say "stopped the node $NODE_NAME and its epmd, and removed its folder"
}

second_env() {
    # The second node's environment: the first node's epmd (the nodes of one cluster find each other through
    # it), its own folder (with a copy of the first node's Erlang cookie in its $HOME), name and ports.
    # shellcheck disable=SC1090
    . "$STATE"
    # shellcheck disable=SC1090
    . "$SECOND_STATE"
    NODE_DIR=$SECOND_DIR NODE_NAME=$SECOND_NAME AMQP_PORT=$SECOND_AMQP_PORT DIST_PORT=$SECOND_DIST_PORT
    node_env
}

start_second() {
    running || { say "no node started by this script is running: start it first"; exit 1; }
    local first_name=$NODE_NAME first_dir=$NODE_DIR
    if [ -f "$SECOND_STATE" ]; then stop_second; . "$STATE"; fi
    start_lock
    PICKED="$AMQP_PORT $MGMT_PORT $EPMD_PORT $DIST_PORT"
    SECOND_AMQP_PORT=$(free_port $((DIST_PORT + 1))); PICKED="$PICKED $SECOND_AMQP_PORT"
    SECOND_MGMT_PORT=$(free_port $((SECOND_AMQP_PORT + 1))); PICKED="$PICKED $SECOND_MGMT_PORT"
    SECOND_DIST_PORT=$(free_port $((SECOND_MGMT_PORT + 1)))
    SECOND_DIR=$(mktemp -d "${TMPDIR:-/tmp}/labkit-rabbitmq.XXXXXX")
    mkdir -p "$SECOND_DIR/home" "$SECOND_DIR/mnesia" "$SECOND_DIR/log"
    chmod 700 "$SECOND_DIR"
    printf 'SECOND_DIR=%q\nSECOND_AMQP_PORT=%q\nSECOND_MGMT_PORT=%q\nSECOND_DIST_PORT=%q\n' \
        "$SECOND_DIR" "$SECOND_AMQP_PORT" "$SECOND_MGMT_PORT" "$SECOND_DIST_PORT" > "$SECOND_STATE"
    chmod 600 "$SECOND_STATE"
    cp "$first_dir/home/.erlang.cookie" "$SECOND_DIR/home/.erlang.cookie"
    chmod 400 "$SECOND_DIR/home/.erlang.cookie"
    : > "$SECOND_DIR/rabbitmq-env.conf"
    echo "[rabbitmq_management]." > "$SECOND_DIR/enabled_plugins"
    echo "[]." > "$SECOND_DIR/advanced.config"
    printf 'listeners.tcp.1 = 127.0.0.1:%s\nmanagement.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %s\nlog.console = false\nlog.file.level = warning\n' \
        "$SECOND_AMQP_PORT" "$SECOND_MGMT_PORT" > "$SECOND_DIR/rabbitmq.conf"
    second_env
    "$RABBIT_BIN/rabbitmq-server" -detached >/dev/null 2>&1 9>&- || true
    # Joined the documented way: wait for it to boot, stop its app, join the first node, start the app again.
    local step
    for step in "wait $NODE_DIR/rabbit.pid --timeout 120" "stop_app" "join_cluster $first_name" "start_app"; do
        # shellcheck disable=SC2086
        if ! timeout 120 "$RABBIT_BIN/rabbitmqctl" -n "$SECOND_NAME" $step >/dev/null 2>&1; then
            say "the second node $SECOND_NAME failed at '$step' (joining $first_name); its log:"
            tail -n 20 "$SECOND_DIR"/log/*.log >&2 2>/dev/null || true
            stop_second
            exit 1
        fi
    done
    say "second node $SECOND_NAME joined $first_name: AMQP 127.0.0.1:$SECOND_AMQP_PORT, data in $SECOND_DIR"
}

ctl_second() {
    [ -f "$SECOND_STATE" ] || { say "no second node started by this script is recorded"; exit 1; }
    second_env
    "$RABBIT_BIN/rabbitmqctl" -n "$SECOND_NAME" "$@"
}

stop_second() {
    [ -f "$SECOND_STATE" ] || { say "no second node started by this script is recorded; nothing to stop"; return 0; }
    (
        second_env
        if [ -f "$NODE_DIR/rabbit.pid" ]; then
            pid=$(cat "$NODE_DIR/rabbit.pid")
            timeout 60 "$RABBIT_BIN/rabbitmqctl" -n "$SECOND_NAME" stop >/dev/null 2>&1 || true
            waited=0
            while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 60 ]; do sleep 0.5; waited=$((waited + 1)); done
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
        fi
        # The first node would list it as a stopped member for ever after: it forgets it (when it is still up).
        # shellcheck disable=SC1090
        . "$STATE"
        node_env
        timeout 60 "$RABBIT_BIN/rabbitmqctl" -n "$NODE_NAME" forget_cluster_node "$SECOND_NAME" >/dev/null 2>&1 || true
        case "$SECOND_DIR" in
            */labkit-rabbitmq.*) rm -rf "$SECOND_DIR" ;;   # only a folder this script made
        esac
    )
    rm -f "$SECOND_STATE"
    say "stopped the second node $SECOND_NAME (the first forgot it) and removed its folder"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    ctl) shift; ctl "$@" ;;
    start-second) start_second ;;
    stop-second) stop_second ;;
    ctl-second) shift; ctl_second "$@" ;;
    amqp-port-second) [ -f "$SECOND_STATE" ] || { say "no second node started by this script is recorded"; exit 1; }
        # shellcheck disable=SC1090
        . "$SECOND_STATE"; echo "$SECOND_AMQP_PORT" ;;
    amqp-port) running || { say "no node started by this script is running"; exit 1; }; echo "$AMQP_PORT" ;;
    *) echo "usage: bash scripts/rabbitmq.sh start|stop|ctl ARGS...|amqp-port|start-second|stop-second|ctl-second ARGS...|amqp-port-second" >&2; exit 2 ;;
esac
