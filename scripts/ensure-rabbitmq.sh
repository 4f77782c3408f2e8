#!/usr/bin/env bash
# Make sure a reference RabbitMQ answers on 127.0.0.1:5672 (the interop suite compares amqpd with it),
# and that amqp-tools (amqp-publish, amqp-consume) is installed.
#
# - AMQPD_REFERENCE_URL set: that broker is the reference; nothing is installed or started.
# - Something already listens on 127.0.0.1:5672: left alone (never stopped or reconfigured).
# - Otherwise: installs Debian's rabbitmq-server if missing, starts it detached, waits until it is up.
# Safe to run any number of times.
set -euo pipefail

HOST=${RABBITMQ_HOST:-127.0.0.1}  # overridable only to exercise this script against stubs
PORT=${RABBITMQ_PORT:-5672}
WAIT_SECONDS=${RABBITMQ_WAIT_SECONDS:-120}
APT_UPDATED=0

log() { echo "ensure-rabbitmq: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
        log "need root to run: $*"; return 1
    fi
}

apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        log "apt-get not found: install $* yourself (or set AMQPD_REFERENCE_URL)"; return 1
    fi
    if [ "$APT_UPDATED" = 0 ]; then
        log "apt-get update"
        as_root apt-get update -qq
        APT_UPDATED=1
    fi
    log "installing $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

port_open() {
    # bash's /dev/tcp: no dependency on nc or ss.
    (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
}

# The management, shovel and federation plugins ship with the package; tests compare amqpd's API, shovels and
# federation with them. Enabling them is allowed on the reference (never stopping it or changing its settings);
# a failure is logged, not fatal: the tests that need a plugin say so.
enable_plugins() {
    command -v rabbitmq-plugins >/dev/null 2>&1 || return 0
    timeout 180 rabbitmq-plugins enable --quiet rabbitmq_management rabbitmq_shovel rabbitmq_shovel_management \
        rabbitmq_federation rabbitmq_federation_management >/dev/null 2>&1 \
        || log "rabbitmq-plugins enable failed; the management, shovel and federation comparisons will say so"
}

if ! command -v amqp-publish >/dev/null 2>&1; then
    apt_install amqp-tools
fi

if [ -n "${AMQPD_REFERENCE_URL:-}" ]; then
    log "AMQPD_REFERENCE_URL is set ($AMQPD_REFERENCE_URL): not touching any local RabbitMQ"
    exit 0
fi

if port_open; then
    log "something already listens on $HOST:$PORT; using it as the reference"
    enable_plugins
    exit 0
fi

if ! command -v rabbitmq-server >/dev/null 2>&1; then
    # The package's postinst may try to start the service itself (init script, no systemd here);
    # when that start fails apt-get reports an error although the server is installed.
    apt_install rabbitmq-server || log "apt-get reported an error; checking whether rabbitmq-server is usable"
    command -v rabbitmq-server >/dev/null 2>&1 || { log "rabbitmq-server is not installed"; exit 1; }
    if port_open; then
        log "rabbitmq-server started by its package; listening on $HOST:$PORT"
        enable_plugins
        exit 0
    fi
fi

# The node is named rabbit@<hostname>; a container whose hostname does not resolve cannot boot it.
if ! getent hosts "$(hostname)" >/dev/null 2>&1; then
    log "hostname $(hostname) does not resolve; naming the node rabbit@localhost"
    export RABBITMQ_NODENAME=rabbit@localhost
fi
log "starting rabbitmq-server -detached"
# Non-fatal: if a node is already booting (e.g. started by the package) this start fails; the wait decides.
as_root rabbitmq-server -detached || log "rabbitmq-server -detached exited with $?; waiting for the port anyway"

deadline=$((SECONDS + WAIT_SECONDS))
until port_open; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        log "RabbitMQ did not listen on $HOST:$PORT within ${WAIT_SECONDS}s; see /var/log/rabbitmq/"
        exit 1
    fi
    sleep 2
done
# The listener opens a moment before boot completes; await_startup waits for the rest (bounded).
if command -v rabbitmqctl >/dev/null 2>&1; then
    remaining=$((deadline - SECONDS)); [ "$remaining" -lt 10 ] && remaining=10
    as_root rabbitmqctl -q await_startup --timeout "$remaining" >/dev/null 2>&1 \
        || log "rabbitmqctl await_startup did not confirm; the port is open, continuing"
fi
log "RabbitMQ is up on $HOST:$PORT"
enable_plugins
