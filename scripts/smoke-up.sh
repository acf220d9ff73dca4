#!/usr/bin/env bash
# Checks the README's first command: `make up` leaves the demo timer firing (seen through
# GET /v1/timers/{id}/runs), a second `make up` neither fails nor duplicates it, and
# `make down` leaves no process behind. Uses free ports, so a stack already running with
# the defaults is not disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."

free_port() { scripts/stack.sh free-port; }
export PUNCTUAL_UP_PG_PORT=$(free_port) PUNCTUAL_UP_BROKER_PORT=$(free_port)
export PUNCTUAL_ADMIN_ADDR=127.0.0.1:$(free_port) PUNCTUAL_SCANNER_ADDR=127.0.0.1:$(free_port)
export PUNCTUAL_EXECUTOR_ADDR=127.0.0.1:$(free_port) PUNCTUAL_DEMO_SINK_ADDR=127.0.0.1:$(free_port)

# A run folder of its own, so a developer's .run is left alone.
export PUNCTUAL_RUN_DIR=$(mktemp -d /tmp/punctual-smoke.XXXXXX)

fail() { echo "smoke-up: FAILED: $*"; scripts/down.sh >/dev/null 2>&1 || true; exit 1; }

scripts/up.sh >"$PUNCTUAL_RUN_DIR/up.log" 2>&1 || { cat "$PUNCTUAL_RUN_DIR/up.log"; fail "make up"; }
id=$(cat "$PUNCTUAL_RUN_DIR/demo-timer.id")
grep -q '^API key: pct_' "$PUNCTUAL_RUN_DIR/up.log" || fail "make up did not print the API key"
auth=(-H "Authorization: Bearer $(cat "$PUNCTUAL_RUN_DIR/api-key")")
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$PUNCTUAL_ADMIN_ADDR/v1/timers")" = 401 ] || fail "the API answers without a key"
grep -q "Console          http://$PUNCTUAL_ADMIN_ADDR/console/" "$PUNCTUAL_RUN_DIR/up.log" || fail "make up did not print the console"
curl -fsS "http://$PUNCTUAL_ADMIN_ADDR/console/" | grep -q '<title>Punctual</title>' || fail "the console is not served"
succeeded() {
  curl -fsS "${auth[@]}" "http://$PUNCTUAL_ADMIN_ADDR/v1/timers/$id/runs?status=succeeded&limit=1000" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))'
}
first=$(succeeded)
[ "$first" -ge 1 ] || fail "the demo timer has not fired"
scripts/up.sh >"$PUNCTUAL_RUN_DIR/up.log" 2>&1 || { cat "$PUNCTUAL_RUN_DIR/up.log"; fail "second make up"; }
# The CLI it prints, with the key it printed.
PUNCTUAL_ADDR="http://$PUNCTUAL_ADMIN_ADDR" PUNCTUAL_API_KEY="$(cat "$PUNCTUAL_RUN_DIR/api-key")" \
  target/debug/punctual timer list --namespace demo | grep -q every-5-seconds || fail "punctual timer list"
count=$(curl -fsS "${auth[@]}" "http://$PUNCTUAL_ADMIN_ADDR/v1/timers?namespace=demo" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["timers"]))')
[ "$count" = 1 ] || fail "a second make up left $count demo timers"
# It fires every 5 s: another success within 15 s.
for _ in $(seq 1 75); do [ "$(succeeded)" -gt "$first" ] && break; sleep 0.2; done
[ "$(succeeded)" -gt "$first" ] || fail "the demo timer stopped firing"
echo "smoke-up: demo timer $id fired $(succeeded) times"

# What this `make up` started, by the pids it wrote (other Punctual processes, a test
# suite's, may be running beside it).
pids=$(cat "$PUNCTUAL_RUN_DIR"/*.pid 2>/dev/null || true)
scripts/down.sh >/dev/null
alive() { local pid left=; for pid in $pids; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done; echo "$left"; }
# A process killed after its grace period takes a moment to be gone: 5 s at most.
for _ in $(seq 1 25); do [ -z "$(alive)" ] && break; sleep 0.2; done
[ -z "$(alive)" ] || fail "processes left behind:$(alive)"
# Kafka's JVM runs kafka.Kafka with the run folder's server.properties.
if [ -f "$PUNCTUAL_RUN_DIR/broker.pid" ] || pgrep -f "kafka\.Kafka $PUNCTUAL_RUN_DIR/" >/dev/null; then fail "broker left running"; fi
if pgrep -f "postgres.*-p $PUNCTUAL_UP_PG_PORT" >/dev/null; then fail "postgres left running"; fi
scripts/stack.sh pg-purge "$PUNCTUAL_RUN_DIR"
echo "smoke-up: ok"
