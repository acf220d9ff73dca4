#!/usr/bin/env bash
# `make test`: starts a real PostgreSQL server and an Apache Kafka broker in a temporary
# folder, runs every test against them, and stops them whatever happens.
#
# The Rust tests run under cargo-nextest (.config/nextest.toml: its test groups keep apart
# the tests that must not overlap). The shell stages (the API fuzzer, the deploy and
# monitoring checks, `make up` end to end, the wheel's benchmark code and the doctests)
# run beside them, and the benchmark's smoke run and the check of .sqlx/ (scripts/sqlx.sh)
# after them, each with a log of its own in
# $PUNCTUAL_TEST_LOGS (default target/test-stages); the whole fails if any fails, printing
# the failing stage's log. Ends with each stage's wall time and the ten slowest tests.
#
# Arguments go to `cargo nextest run` (e.g. scripts/test.sh -p punctual-admin); with
# arguments, only the Rust tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

NEXTEST_VERSION=0.9.151
t0=$(date +%s)
timings=()
timed() { # NAME COMMAND...: runs in the foreground, records the wall time
  local name=$1 s=$(date +%s) rc=0
  shift
  "$@" || rc=$?
  timings+=("$(printf '%-14s %4ds' "$name" $(($(date +%s) - s)))")
  return $rc
}

ensure_nextest() {
  if ! cargo nextest --version 2>/dev/null | grep -q "cargo-nextest $NEXTEST_VERSION"; then
    echo "[test] installing cargo-nextest $NEXTEST_VERSION (once; cached in ~/.cargo/bin)"
    cargo install --quiet --locked cargo-nextest --version "$NEXTEST_VERSION"
  fi
}
timed tools scripts/stack.sh tools
timed nextest-tool ensure_nextest
timed sqlx-tool scripts/sqlx.sh tool

work=$(mktemp -d /tmp/punctual-test.XXXXXX)
logs=${PUNCTUAL_TEST_LOGS:-$root/target/test-stages}
rm -rf "$logs" && mkdir -p "$logs"
pids=()
stage_pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/stack.sh broker-stop "$work" >/dev/null 2>&1 || true
  if [ "${KEEP_TEST_STACK:-}" = "" ]; then scripts/stack.sh pg-purge "$work" || true; else scripts/stack.sh pg-stop "$work" || true; fi
}
trap cleanup EXIT

free_port() { scripts/stack.sh free-port; }
pg_port=$(free_port)
broker_port=$(free_port)

# Postgres and the broker start while the workspace builds. Durability is not what these
# tests measure (the fault tests start their own servers).
(
  PG_EXTRA_OPTS="-c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    scripts/stack.sh pg-start "$work" "$pg_port"
  scripts/stack.sh broker-start "$work" "$broker_port" throwaway
) >"$logs/servers.log" 2>&1 &
servers=$!
pids+=("$servers")
# The browser tests' Chromium, ChromeDriver and axe-core, installed meanwhile if missing.
scripts/browser.sh tools >"$work/axe-path" 2>"$logs/browser-tools.log" &
browser_tools=$!
pids+=("$browser_tools")

# One build of everything the stages and the tests run: the services, the CLI, the bench
# harness, every test binary and the wheel's benchmark (in the test profile: no release build).
timed build cargo build --workspace --bins --tests --benches
wait "$servers" || { cat "$logs/servers.log"; echo "[test] the test run's Postgres or broker did not start"; exit 1; }
wait "$browser_tools" || { cat "$logs/browser-tools.log"; echo "[test] the browser tests' tools are missing"; exit 1; }
export PUNCTUAL_TEST_AXE="$(cat "$work/axe-path")"

export PUNCTUAL_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port"
export PUNCTUAL_TEST_KAFKA_BROKERS="127.0.0.1:$broker_port"
export PUNCTUAL_TEST_STACK_DIR="$work"

# stage NAME COMMAND...: runs in the background, its output in $logs/NAME.log.
stage() {
  local name=$1
  shift
  (
    s=$(date +%s) rc=0
    # Niced: the tests beside them have timing to keep (recoveries under load).
    nice -n 10 "$@" >"$logs/$name.log" 2>&1 || rc=$?
    echo "$rc $(($(date +%s) - s))" >"$logs/$name.status"
  ) &
  pids+=("$!")
  stage_pids+=("$!")
}

if [ $# -eq 0 ]; then
  # The admin API under a property-based fuzzer driven by its /openapi.json (an admin and a
  # database of its own).
  stage api-fuzz scripts/api-fuzz.sh
  # The deployment files, offline; the alert rules (promtool, with their unit tests) and
  # the dashboards' structure.
  stage check-deploy scripts/check-deploy.sh
  stage check-monitoring scripts/check-monitoring.sh
  # The README's first command, end to end, on ports of its own.
  stage smoke-up scripts/smoke-up.sh
fi

nextest_started=$(date +%s)
# Made before nextest starts: the follower below must find it (started in the background,
# nextest's redirection could come after tail's first look, and tail then gives up).
: >"$logs/nextest.log"
cargo nextest run --workspace --no-fail-fast "$@" >"$logs/nextest.log" 2>&1 &
nextest=$!
pids+=("$nextest")
tail -n +1 -f --pid="$nextest" "$logs/nextest.log" &
follow=$!
# The stages that run cargo start once nextest has taken (and let go of) the build lock.
until grep -q '^ *Starting ' "$logs/nextest.log" || ! kill -0 "$nextest" 2>/dev/null; do sleep 0.5; done
if [ $# -eq 0 ]; then
  # The wheel's benchmark code, each case once, in the test profile.
  stage wheel-bench env WHEEL_BENCH_SIZES=10000 cargo test -q -p punctual-wheel --benches
  stage doctests cargo test -q --workspace --doc
fi
nextest_rc=0
wait "$nextest" || nextest_rc=$?
wait "$follow" || true # tail ends once nextest has, after its last lines
timings+=("$(printf '%-14s %4ds' nextest $(($(date +%s) - nextest_started)))")
if [ $# -eq 0 ]; then
  # The benchmarks' smoke mode: each scenario small, so the harness cannot rot (it fails
  # if anything was lost). After the tests, not beside them: niced under the whole suite,
  # its services were starved into delivering a few occurrences a second, and what it
  # measures (a steady load, claim baselines) then tells nothing. The suite's broker;
  # Postgres servers of its own.
  stage bench-smoke target/debug/punctual-bench run --smoke --out target/bench-smoke \
    --brokers "$PUNCTUAL_TEST_KAFKA_BROKERS"
fi

# The stages still running when the tests ended.
wait_stages() {
  local p
  for p in "${stage_pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
timed stages-after wait_stages
if [ $# -eq 0 ]; then
  # The offline data of the SQL checked at compile time (.sqlx/) against the statements and
  # the migrations. Last: it touches the crates' sources to make the macros run again.
  stage sqlx-check scripts/sqlx.sh check "${PUNCTUAL_TEST_DATABASE_URL}"
  wait_stages
fi
failed=()
for log in "$logs"/*.log; do
  name=$(basename "$log" .log)
  [ -e "$logs/$name.status" ] || continue
  read -r rc secs <"$logs/$name.status"
  timings+=("$(printf '%-14s %4ds (a stage)%s' "$name" "$secs" "$([ "$rc" = 0 ] || echo ", FAILED")")")
  if [ "$rc" != 0 ]; then
    failed+=("$name")
    echo "===== stage $name failed (exit $rc); its log ($log): ====="
    tail -n 80 "$log"
  fi
done

echo
echo "===== make test: wall time per stage ====="
printf '%s\n' "${timings[@]}"
printf '%-14s %4ds\n' total $(($(date +%s) - t0))
junit=target/nextest/default/junit.xml
if [ -f "$junit" ]; then
  echo "===== the ten slowest tests ====="
  python3 - "$junit" <<'EOF'
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time", 0)), c.get("classname", ""), c.get("name", "")) for c in ET.parse(sys.argv[1]).iter("testcase")]
for t, binary, name in sorted(cases, reverse=True)[:10]:
    print(f"{t:7.1f}s  {binary} {name}")
EOF
fi
# nextest's closing line last, where CI reads it.
grep -E '^ *Summary \[' "$logs/nextest.log" | tail -n 1 || true
if [ "$nextest_rc" != 0 ] || [ "${#failed[@]}" -gt 0 ]; then
  echo "make test: FAILED (nextest exit $nextest_rc; stages failed: ${failed[*]:-none})"
  exit 1
fi
