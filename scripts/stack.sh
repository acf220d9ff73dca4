#!/usr/bin/env bash
# Starts and stops the pieces of a local Punctual stack without Docker: a PostgreSQL 15
# server and a Kafka-protocol broker (tansu), each with its data in a folder of ours.
#
#   scripts/stack.sh tools                      install what is missing (apt, cargo)
#   scripts/stack.sh pg-start DIR PORT          initdb DIR if needed, start Postgres on 127.0.0.1:PORT
#   scripts/stack.sh pg-stop DIR
#   scripts/stack.sh pg-purge DIR               stop Postgres and delete DIR and its data
#   scripts/stack.sh broker-start DIR PORT [STORAGE]   start the broker on 127.0.0.1:PORT
#                                               (STORAGE: memory (default) or sqlite)
#   scripts/stack.sh broker-stop DIR
#   scripts/stack.sh tansu-bin                  print the broker binary's path
#
# Postgres refuses to run as root, so when we are root it runs as the 'postgres' user.
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
CACHE_DIR=${PUNCTUAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/punctual}
TANSU_ROOT="$CACHE_DIR/tansu"
TANSU_VERSION=${TANSU_VERSION:-}

log() { printf '[stack] %s\n' "$*" >&2; }

as_pg_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

tansu_bin() {
  if [ -x "$TANSU_ROOT/bin/tansu" ]; then echo "$TANSU_ROOT/bin/tansu"; return; fi
  if command -v tansu >/dev/null 2>&1; then command -v tansu; return; fi
  return 1
}

apt_install() {
  if [ "$(id -u)" != 0 ]; then log "please install: $*"; exit 1; fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_tools() {
  local missing=()
  [ -x "$PG_BIN/initdb" ] || missing+=(postgresql-15)
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  dpkg -s libssl-dev >/dev/null 2>&1 || missing+=(libssl-dev)
  dpkg -s zlib1g-dev >/dev/null 2>&1 || missing+=(zlib1g-dev)
  command -v make >/dev/null 2>&1 || missing+=(make)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  if [ "${#missing[@]}" -gt 0 ]; then apt_install "${missing[@]}"; fi
  if ! tansu_bin >/dev/null; then
    # About 8 minutes on 2 cores; cached under $CACHE_DIR for the runs that follow.
    log "installing the tansu broker into $TANSU_ROOT (cached for next time)"
    mkdir -p "$TANSU_ROOT"
    cargo install tansu ${TANSU_VERSION:+--version "$TANSU_VERSION"} --locked --features dynostore,libsql \
      --root "$TANSU_ROOT" >"$CACHE_DIR/tansu-install.log" 2>&1 \
      || { tail -n 30 "$CACHE_DIR/tansu-install.log" >&2; exit 1; }
  fi
}

# A folder the postgres user can reach: $1 if every parent is traversable, else a
# folder under /var/tmp named after $1 (linked from $1).
pg_data_dir() {
  local dir=$1
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$dir"; then
    local alt
    alt="/var/tmp/punctual-pg-$(printf '%s' "$(cd "$dir" && pwd)" | md5sum | cut -c1-12)"
    mkdir -p "$alt"
    ln -sfn "$alt" "$dir/data-link"
    dir=$alt
  fi
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  echo "$dir"
}

pg_start() {
  local dir port data
  dir=$1 port=$2
  data=$(pg_data_dir "$dir")/pgdata
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$data"
    as_pg_user "$PG_BIN/initdb" -D "$data" -U postgres -A trust -E UTF8 >/dev/null
  fi
  if as_pg_user "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    log "postgres already running ($data)"
  else
    as_pg_user "$PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
      -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c max_connections=400 ${PG_EXTRA_OPTS:-}" start >/dev/null
  fi
  echo "$data" >"$dir/pgdata.path"
  log "postgres on 127.0.0.1:$port"
}

pg_stop() {
  local dir=$1
  [ -f "$dir/pgdata.path" ] || return 0
  local data
  data=$(cat "$dir/pgdata.path")
  as_pg_user "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
}

# Stops Postgres and deletes its data (also the /var/tmp folder used when $1 was not
# reachable by the postgres user).
pg_purge() {
  local dir=$1
  pg_stop "$dir"
  if [ -f "$dir/pgdata.path" ]; then
    local data
    data=$(cat "$dir/pgdata.path")
    case "$data" in /var/tmp/punctual-pg-*) rm -rf "$(dirname "$data")" ;; esac
  fi
  rm -rf "$dir"
}

broker_start() {
  local dir port storage bin
  dir=$1 port=$2 storage=${3:-memory}
  mkdir -p "$dir"
  if [ -f "$dir/broker.pid" ] && kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null; then
    log "broker already running"
    return 0
  fi
  bin=$(tansu_bin) || { log "tansu is not installed: run 'scripts/stack.sh tools'"; exit 1; }
  local engine="memory://tansu/"
  # tansu reads a sqlite:// path relative to its working directory: start it in $dir.
  [ "$storage" = sqlite ] && engine="sqlite://broker.db"
  (cd "$dir" && exec nohup "$bin" broker --storage-engine "$engine" \
    --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    >"$dir/broker.log" 2>&1) &
  echo $! >"$dir/broker.pid"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "broker on 127.0.0.1:$port ($storage)"
      return 0
    fi
    sleep 0.1
  done
  log "broker did not start; its log:"; tail -n 20 "$dir/broker.log" >&2; exit 1
}

broker_stop() {
  local dir=$1
  if [ -f "$dir/broker.pid" ]; then
    kill "$(cat "$dir/broker.pid")" 2>/dev/null || true
    rm -f "$dir/broker.pid"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  tools) ensure_tools ;;
  tansu-bin) tansu_bin ;;
  pg-start) pg_start "$@" ;;
  pg-stop) pg_stop "$@" ;;
  pg-purge) pg_purge "$@" ;;
  broker-start) broker_start "$@" ;;
  broker-stop) broker_stop "$@" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
