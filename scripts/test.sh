#!/usr/bin/env bash
# `make test`: starts a real PostgreSQL server and an Apache Kafka broker in a temporary
# folder, runs the whole test suite against them, and stops them whatever happens.
# Arguments are passed to `cargo test` (e.g. scripts/test.sh -p punctual-admin).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/stack.sh tools

work=$(mktemp -d /tmp/punctual-test.XXXXXX)
cleanup() {
  scripts/stack.sh broker-stop "$work" || true
  if [ "${KEEP_TEST_STACK:-}" = "" ]; then scripts/stack.sh pg-purge "$work" || true; else scripts/stack.sh pg-stop "$work" || true; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pg_port=$(free_port)
broker_port=$(free_port)

# Durability is not what these tests measure (the fault tests start their own servers).
PG_EXTRA_OPTS="-c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
  scripts/stack.sh pg-start "$work" "$pg_port"
scripts/stack.sh broker-start "$work" "$broker_port" throwaway

export PUNCTUAL_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port"
export PUNCTUAL_TEST_KAFKA_BROKERS="127.0.0.1:$broker_port"
export PUNCTUAL_TEST_STACK_DIR="$work"

cargo build --workspace --bins
cargo test --workspace "$@"

# The admin API under a property-based fuzzer driven by its /openapi.json.
scripts/api-fuzz.sh

# The benchmarks' smoke mode: each scenario small, so the harness cannot rot (it starts
# its own Postgres and broker, and fails if anything was lost).
cargo run -p punctual-bench -- run --smoke --out target/bench-smoke
WHEEL_BENCH_SIZES=10000 cargo bench -p punctual-wheel -- --test

# The deployment files, offline; the alert rules (promtool, with their unit tests) and the
# dashboards' structure.
scripts/check-deploy.sh
scripts/check-monitoring.sh

# The README's first command, end to end.
scripts/smoke-up.sh
