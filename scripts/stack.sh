#!/usr/bin/env bash
# Starts and stops the pieces of a local Punctual stack without Docker: a PostgreSQL 15
# server and Apache Kafka (KRaft, from Maven Central's jars), each with its data in a
# folder of ours.
#
#   scripts/stack.sh tools                      install what is missing (apt; Kafka's jars, once)
#   scripts/stack.sh pg-start DIR PORT          initdb DIR if needed, start Postgres on 127.0.0.1:PORT
#   scripts/stack.sh pg-stop DIR
#   scripts/stack.sh pg-purge DIR               stop Postgres and delete DIR and its data
#   scripts/stack.sh broker-start DIR PORT [durable|throwaway]
#                                               one Kafka node (broker+controller) on 127.0.0.1:PORT,
#                                               its log in DIR/kafka-logs; durable (default) keeps it
#                                               across restarts, throwaway starts empty every time
#   scripts/stack.sh broker-stop DIR            SIGTERM, then SIGKILL after 10 s
#   scripts/stack.sh broker-kill DIR            SIGKILL (what was acknowledged stays: page cache)
#   scripts/stack.sh broker-wipe DIR            delete a stopped broker's log (the next start is empty)
#   scripts/stack.sh cluster-start DIR          three Kafka nodes (RF 3, min.insync 2); DIR/brokers
#   scripts/stack.sh node-start|node-stop|node-kill|node-wipe DIR N   one of the cluster's nodes (1-3)
#   scripts/stack.sh cluster-stop DIR
#   scripts/stack.sh free-port [restartable]    print a free port to listen on (below the ephemeral range;
#                                               restartable: 10000-11999, for servers restarted on it)
#   scripts/stack.sh kafka-class CLASS ARGS...  run a Kafka main class, e.g.
#                                               org.apache.kafka.tools.TopicCommand --bootstrap-server ...
#
# Postgres refuses to run as root, so when we are root it runs as the 'postgres' user.
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
CACHE_DIR=${PUNCTUAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/punctual}
KAFKA_CONF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kafka"
# The one place the version is written: scripts/kafka/pom.xml.
KAFKA_VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_CONF/pom.xml")
KAFKA_LIB="$CACHE_DIR/kafka-$KAFKA_VERSION/lib"
JAVA=${JAVA:-java}
# Each node's heap; several brokers may run at once in the tests.
KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}
# As Kafka's bin/kafka-run-class.sh, less JMX and GC logging, and the JVM's quick compiler
# only (TieredStopAtLevel=1): on a small machine the optimising one spent the broker's first
# minutes compiling, a quarter of an idle broker's CPU, and the quick one's code costs no
# more a fire (docs/BENCHMARKS.md, "Idle"). Production brokers: docs/operations.md, "Kafka".
KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS:-"-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -XX:TieredStopAtLevel=1 -Djava.awt.headless=true"}

log() { printf '[stack] %s\n' "$*" >&2; }

as_pg_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
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
  command -v "$JAVA" >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  # The monitoring tests' Prometheus server and promtool.
  command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
  if [ "${#missing[@]}" -gt 0 ]; then apt_install "${missing[@]}"; fi
  local major
  major=$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  if [ "${major%%.*}" -lt 17 ] 2>/dev/null; then
    log "Kafka $KAFKA_VERSION needs Java 17 or newer; $JAVA is $major (set JAVA=/path/to/java)"; exit 1
  fi
  fetch_kafka
}

# Kafka's jars, once, into $KAFKA_LIB: fetched into a folder of their own, renamed into
# place when complete, so an interrupted fetch is fetched again next time.
fetch_kafka() {
  [ -d "$KAFKA_LIB" ] && return 0
  log "fetching Apache Kafka $KAFKA_VERSION's jars into $KAFKA_LIB (cached for next time)"
  mkdir -p "$(dirname "$KAFKA_LIB")"
  FETCH_TMP=$(mktemp -d "$(dirname "$KAFKA_LIB")/fetch.XXXXXX")
  trap 'rm -rf "$FETCH_TMP"' EXIT
  # A Maven repository of its own, deleted after: the jars are kept once, in $KAFKA_LIB.
  if ! mvn -q -B -f "$KAFKA_CONF/pom.xml" -Dmaven.repo.local="$FETCH_TMP/m2" \
      dependency:copy-dependencies -DoutputDirectory="$FETCH_TMP/lib" >"$FETCH_TMP/mvn.log" 2>&1; then
    tail -n 30 "$FETCH_TMP/mvn.log" >&2; exit 1
  fi
  [ -f "$FETCH_TMP/lib/kafka_2.13-$KAFKA_VERSION.jar" ] || { log "the fetch brought no kafka_2.13 jar"; exit 1; }
  # mv -T fails if another fetch finished first; its jars are as good as ours.
  mv -T "$FETCH_TMP/lib" "$KAFKA_LIB" 2>/dev/null || true
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

# ---- Kafka ---------------------------------------------------------------------------
# A node's folder DIR holds server.properties (written at each start), broker.port and
# controller.port (picked once, so a restart listens where the clients and the quorum
# expect it), kafka-logs/ (the data: the topics and the KRaft metadata log), broker.log
# and broker.pid.

# A free port on 127.0.0.1 to listen on: at random below the kernel's ephemeral range
# (where no outgoing connection can take it before the server binds it), checked by
# binding it once. Ports 10000-11999 are kept for servers that tests kill and start again
# on the same port (brokers, Postgres: `restartable`); every other server listens above
# them, so none can take a port while its server is down. testkit's ports do the same.
free_port() { # [restartable]
  python3 - "${1:-}" <<'PY'
import random, socket, sys
first = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
low, high = (10000, 12000) if sys.argv[1] == "restartable" else (12000, max(first, 12001))
for _ in range(200):
    port = random.randrange(low, high)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    sys.exit("no free port in %d-%d" % (low, high - 1))
PY
}

# A Kafka Uuid (base64url of 16 random bytes, no padding), as `kafka-storage.sh random-uuid`
# prints it, without starting a JVM for it. Kafka's own never starts with '-'.
new_uuid() {
  python3 -c '
import base64, uuid
while True:
    u = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    if not u.startswith("-"):
        print(u); break'
}

need_jars() {
  [ -d "$KAFKA_LIB" ] || { log "Kafka's jars are not fetched: run 'scripts/stack.sh tools'"; exit 1; }
}

# A Kafka main class run in the foreground (StorageTool, TopicCommand, …): warnings only.
kafka_class() {
  need_jars
  "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$KAFKA_CONF/log4j2.properties" -Dpunctual.kafka.log.level=WARN \
    -cp "$KAFKA_LIB/*" "$@"
}

# True if process $1 exists and is not a zombie (this machine's init may not reap them).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# The pid of DIR's Kafka node, if it runs.
node_pid() {
  local dir=$1 pid
  [ -f "$dir/broker.pid" ] || return 1
  pid=$(cat "$dir/broker.pid")
  alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka ' || return 1
  echo "$pid"
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# DIR/server.properties for node ID: DIR's ports, QUORUM (one line), replication RF and
# min.insync.replicas MINISR for the topics and Kafka's internal topics.
write_node_props() {
  local dir=$1 id=$2 quorum=$3 rf=$4 minisr=$5 port cport
  port=$(cat "$dir/broker.port") cport=$(cat "$dir/controller.port")
  {
    cat "$KAFKA_CONF/server.properties"
    echo
    echo "# This node (written by scripts/stack.sh at each start)"
    echo "node.id=$id"
    echo "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    echo "advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    echo "log.dirs=$dir/kafka-logs"
    echo "$quorum"
    echo "default.replication.factor=$rf"
    echo "min.insync.replicas=$minisr"
    echo "offsets.topic.replication.factor=$rf"
    echo "transaction.state.log.replication.factor=$rf"
    echo "transaction.state.log.min.isr=$minisr"
    echo "share.coordinator.state.topic.replication.factor=$rf"
    echo "share.coordinator.state.topic.min.isr=$minisr"
  } >"$dir/server.properties"
}

# Formats DIR's log folder unless it was (meta.properties is written last): cluster id
# CID, and --standalone for a single node (a dynamic quorum of one) or nothing for the
# static voters of a cluster.
format_node() {
  local dir=$1 cid=$2
  shift 2
  [ -f "$dir/kafka-logs/meta.properties" ] && return 0
  rm -rf "$dir/kafka-logs"
  kafka_class kafka.tools.StorageTool format -t "$cid" -c "$dir/server.properties" "$@" \
    >"$dir/format.log" 2>&1 || { log "formatting $dir/kafka-logs failed:"; cat "$dir/format.log" >&2; exit 1; }
}

launch_node() {
  local dir=$1 port
  port=$(cat "$dir/broker.port")
  if listening "$port"; then log "127.0.0.1:$port is taken by another process"; exit 1; fi
  # shellcheck disable=SC2086 # the options are words
  nohup "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_OPTS -Dlog4j2.configurationFile="$KAFKA_CONF/log4j2.properties" \
    -cp "$KAFKA_LIB/*" kafka.Kafka "$dir/server.properties" </dev/null >>"$dir/broker.log" 2>&1 &
  echo $! >"$dir/broker.pid"
}

# Waits until DIR's node accepts connections: Kafka opens its client port once it has
# started (its broker registered and unfenced by the controller).
wait_node() {
  local dir=$1 port pid
  port=$(cat "$dir/broker.port") pid=$(cat "$dir/broker.pid")
  for _ in $(seq 1 300); do
    alive "$pid" || { log "Kafka exited; the end of $dir/broker.log:"; tail -n 30 "$dir/broker.log" >&2; exit 1; }
    listening "$port" && return 0
    sleep 0.2
  done
  log "Kafka did not open 127.0.0.1:$port in 60 s; the end of $dir/broker.log:"
  tail -n 30 "$dir/broker.log" >&2
  stop_node "$dir"
  exit 1
}

kafka_version_of() {
  local v
  v=$(sed -n 's/.*Kafka version: \([^ ]*\).*/\1/p' "$1/broker.log" | tail -n 1)
  echo "${v:-$KAFKA_VERSION}"
}

# SIGTERM (Kafka's shutdown hook: the broker, then the controller), SIGKILL after 10 s.
stop_node() {
  local dir=$1 pid
  if pid=$(node_pid "$dir"); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      log "Kafka (pid $pid) still running 10 s after SIGTERM: SIGKILL"
      kill_node "$dir"
    fi
  fi
  rm -f "$dir/broker.pid"
}

kill_node() {
  local dir=$1 pid
  if pid=$(node_pid "$dir"); then
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  fi
  rm -f "$dir/broker.pid"
}

wipe_node() {
  local dir=$1
  if node_pid "$dir" >/dev/null; then log "Kafka is running in $dir: stop or kill it first"; exit 1; fi
  rm -rf "$dir/kafka-logs"
}

broker_start() {
  local dir=$1 port=$2 mode=${3:-durable} pid
  case "$mode" in durable | throwaway) ;; *) log "broker-start: durable or throwaway, not '$mode'"; exit 2 ;; esac
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if pid=$(node_pid "$dir"); then
    log "Kafka already running (pid $pid) on 127.0.0.1:$(cat "$dir/broker.port")"
    return 0
  fi
  need_jars
  [ "$mode" = throwaway ] && rm -rf "$dir/kafka-logs"
  echo "$port" >"$dir/broker.port"
  [ -s "$dir/controller.port" ] || free_port restartable >"$dir/controller.port"
  write_node_props "$dir" 1 "controller.quorum.bootstrap.servers=127.0.0.1:$(cat "$dir/controller.port")" 1 1
  # A new cluster id at each format: a broker that lost its data is a new cluster.
  format_node "$dir" "$(new_uuid)" --standalone
  launch_node "$dir"
  wait_node "$dir"
  log "Apache Kafka $(kafka_version_of "$dir") on 127.0.0.1:$port ($mode; pid $(cat "$dir/broker.pid"))"
}

# ---- A cluster of three nodes, each broker and controller (static quorum) -------------
# DIR/nodeN is node N's folder (as above); DIR/cluster.id; DIR/brokers: the bootstrap list.

CLUSTER_NODES="1 2 3"

cluster_prepare() { # DIR: picks the cluster id and every node's ports, once
  local dir=$1 n used=" "
  [ -s "$dir/cluster.id" ] || new_uuid >"$dir/cluster.id"
  for n in $CLUSTER_NODES; do
    mkdir -p "$dir/node$n"
    for f in broker.port controller.port; do
      if [ ! -s "$dir/node$n/$f" ]; then
        local p
        p=$(free_port restartable)
        while [[ "$used" == *" $p "* ]]; do p=$(free_port restartable); done
        echo "$p" >"$dir/node$n/$f"
      fi
      used="$used$(cat "$dir/node$n/$f") "
    done
  done
  local voters="" brokers=""
  for n in $CLUSTER_NODES; do
    voters="$voters${voters:+,}$n@127.0.0.1:$(cat "$dir/node$n/controller.port")"
    brokers="$brokers${brokers:+,}127.0.0.1:$(cat "$dir/node$n/broker.port")"
  done
  echo "$voters" >"$dir/voters"
  echo "$brokers" >"$dir/brokers"
}

cluster_format() { # DIR N: node N's server.properties, and its log folder formatted if new
  local dir=$1 n=$2
  write_node_props "$dir/node$n" "$n" "controller.quorum.voters=$(cat "$dir/voters")" 3 2
  # No --standalone: the voters are static (StorageTool refuses both).
  format_node "$dir/node$n" "$(cat "$dir/cluster.id")"
}

cluster_launch() { # DIR N: starts node N unless it runs; does not wait
  local dir=$1 n=$2
  node_pid "$dir/node$n" >/dev/null && return 0
  cluster_format "$dir" "$n"
  launch_node "$dir/node$n"
}

cluster_start() {
  local dir=$1 n pid
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  need_jars
  cluster_prepare "$dir"
  # The three formats side by side (a JVM each, 2 s), then the nodes, all at once: a
  # node's broker starts only once the controllers have a majority.
  local formats=()
  for n in $CLUSTER_NODES; do
    node_pid "$dir/node$n" >/dev/null || { cluster_format "$dir" "$n" & formats+=($!); }
  done
  for pid in "${formats[@]}"; do wait "$pid" || exit 1; done
  for n in $CLUSTER_NODES; do cluster_launch "$dir" "$n"; done
  for n in $CLUSTER_NODES; do wait_node "$dir/node$n"; done
  log "Apache Kafka $(kafka_version_of "$dir/node1"), 3 nodes: $(cat "$dir/brokers")"
}

node_dir() { # DIR N
  case "$2" in 1 | 2 | 3) ;; *) log "node: 1, 2 or 3, not '$2'"; exit 2 ;; esac
  [ -f "$1/cluster.id" ] || { log "$1 holds no cluster: run cluster-start first"; exit 1; }
  echo "$(cd "$1" && pwd)/node$2"
}

node_start() {
  local dir n=$2
  dir=$(cd "$1" && pwd)
  node_dir "$dir" "$n" >/dev/null
  if node_pid "$dir/node$n" >/dev/null; then log "node $n already running"; return 0; fi
  cluster_launch "$dir" "$n"
  wait_node "$dir/node$n"
  log "node $n on 127.0.0.1:$(cat "$dir/node$n/broker.port")"
}

cluster_stop() {
  local dir=$1 n pid pids=()
  [ -f "$dir/cluster.id" ] || return 0
  # SIGTERM to all at once, so that the controllers keep a majority while the brokers
  # shut down; SIGKILL for whichever is still there after 10 s.
  for n in $CLUSTER_NODES; do
    if pid=$(node_pid "$dir/node$n"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  for _ in $(seq 1 100); do
    local any=0
    for pid in "${pids[@]}"; do alive "$pid" && any=1; done
    [ "$any" = 0 ] && break
    sleep 0.1
  done
  for n in $CLUSTER_NODES; do kill_node "$dir/node$n"; done
}

cmd=${1:-}
shift || true
case "$cmd" in
  tools) ensure_tools ;;
  free-port) free_port "${1:-}" ;;
  pg-start) pg_start "$@" ;;
  pg-stop) pg_stop "$@" ;;
  pg-purge) pg_purge "$@" ;;
  broker-start) broker_start "$@" ;;
  broker-stop) stop_node "${1:?broker-stop DIR}" ;;
  broker-kill) kill_node "${1:?broker-kill DIR}" ;;
  broker-wipe) wipe_node "${1:?broker-wipe DIR}" ;;
  cluster-start) cluster_start "$@" ;;
  cluster-stop) cluster_stop "$@" ;;
  node-start) node_start "$@" ;;
  node-stop) nd=$(node_dir "$@") && stop_node "$nd" ;;
  node-kill) nd=$(node_dir "$@") && kill_node "$nd" ;;
  node-wipe) nd=$(node_dir "$@") && wipe_node "$nd" ;;
  kafka-class) kafka_class "$@" ;;
  *) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
