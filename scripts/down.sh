#!/usr/bin/env bash
# `make down`: stops what `make up` started, services first, then Kafka and Postgres
# (stack.sh broker-stop waits for the JVM to exit, and kills it after 10 s).
set -euo pipefail
cd "$(dirname "$0")/.."
run=${PUNCTUAL_RUN_DIR:-$(pwd)/.run}
[ -d "$run" ] || { echo "nothing to stop"; exit 0; }
for name in demo-sink executor scanner admin; do
  pidfile="$run/$name.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    echo "stopped $name"
  fi
  rm -f "$pidfile"
done
scripts/stack.sh broker-stop "$run"
scripts/stack.sh pg-stop "$run"
echo "stopped Kafka and Postgres (data kept in .run/; delete it for a clean slate)"
