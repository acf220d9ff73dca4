#!/usr/bin/env bash
# `make up`: installs what is missing, starts Postgres, the broker, the three services and
# a demo callback target, creates a demo timer firing every 5 seconds, and shows it working.
# Everything lives under .run/ (git-ignored); `make down` stops it all. Running it twice
# neither fails nor duplicates anything.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
run=${PUNCTUAL_RUN_DIR:-$root/.run}
mkdir -p "$run/logs"

PG_PORT=${PUNCTUAL_UP_PG_PORT:-15432}
BROKER_PORT=${PUNCTUAL_UP_BROKER_PORT:-19092}
ADMIN_ADDR=${PUNCTUAL_ADMIN_ADDR:-127.0.0.1:8080}
SCANNER_ADDR=${PUNCTUAL_SCANNER_ADDR:-127.0.0.1:8081}
EXECUTOR_ADDR=${PUNCTUAL_EXECUTOR_ADDR:-127.0.0.1:8082}
SINK_ADDR=${PUNCTUAL_DEMO_SINK_ADDR:-127.0.0.1:8090}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

say "installing what is missing"
scripts/stack.sh tools
say "building the services"
cargo build --workspace --bins --quiet

say "starting Postgres and Kafka"
scripts/stack.sh pg-start "$run" "$PG_PORT"
# Kafka keeps its log in .run/kafka-logs across `make down` and `make up`.
scripts/stack.sh broker-start "$run" "$BROKER_PORT" durable
if ! psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'punctual'" | grep -q 1; then
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE punctual"
fi

export PUNCTUAL_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/punctual"
export PUNCTUAL_KAFKA_BROKERS="127.0.0.1:$BROKER_PORT"
export PUNCTUAL_ADMIN_ADDR=$ADMIN_ADDR PUNCTUAL_SCANNER_ADDR=$SCANNER_ADDR PUNCTUAL_EXECUTOR_ADDR=$EXECUTOR_ADDR
export PUNCTUAL_DEMO_SINK_ADDR=$SINK_ADDR
# The demo sink listens on loopback, which callbacks may reach only when allowed.
export PUNCTUAL_CALLBACK_ALLOW=${PUNCTUAL_CALLBACK_ALLOW:-127.0.0.0/8,::1,localhost}

start() { # name binary health-address
  local name=$1 bin=$2 addr=$3
  if [ -f "$run/$name.pid" ] && kill -0 "$(cat "$run/$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$run/$name.pid"))"
    return
  fi
  nohup "$root/target/debug/$bin" >>"$run/logs/$name.log" 2>&1 &
  echo $! >"$run/$name.pid"
  for _ in $(seq 1 300); do
    if curl -fsS "http://$addr/healthz" >/dev/null 2>&1; then echo "$name up on http://$addr"; return; fi
    if ! kill -0 "$(cat "$run/$name.pid")" 2>/dev/null; then
      echo "$name exited; its log:"; tail -n 20 "$run/logs/$name.log"; exit 1
    fi
    sleep 0.2
  done
  echo "$name did not become healthy; its log:"; tail -n 20 "$run/logs/$name.log"; exit 1
}

# The admin API's first key (an admin key): made once, kept in the run folder, readable
# only by its owner; the admin creates it at start if it does not exist yet.
if [ ! -s "$run/api-key" ]; then
  (umask 077 && python3 -c 'import base64, secrets
print("pct_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())' >"$run/api-key")
fi
API_KEY=$(cat "$run/api-key")
export PUNCTUAL_BOOTSTRAP_API_KEY=$API_KEY
auth=(-H "Authorization: Bearer $API_KEY")
# The key that seals secrets at rest (signing secrets, secret headers): made once, kept
# beside the API key; losing it loses the secrets it sealed.
if [ ! -s "$run/secret-key" ]; then
  (umask 077 && python3 -c 'import base64, secrets
print("k1:" + base64.b64encode(secrets.token_bytes(32)).decode())' >"$run/secret-key")
fi
export PUNCTUAL_SECRET_KEY=$(cat "$run/secret-key")

say "migrating the schema"
# The scanner and executor run as a role that reads and writes rows and changes no schema
# (docs/operations.md, "Least privilege"); the admin, which migrates, as the owner.
if ! psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'punctual_service'" | grep -q 1; then
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE ROLE punctual_service LOGIN"
fi
"$root/target/debug/punctual" migrate --service-role punctual_service
SERVICE_DATABASE_URL="postgres://punctual_service@127.0.0.1:$PG_PORT/punctual"

say "starting the services"
start admin punctual-admin "$ADMIN_ADDR"
PUNCTUAL_DATABASE_URL=$SERVICE_DATABASE_URL start scanner punctual-scanner "$SCANNER_ADDR"
PUNCTUAL_DATABASE_URL=$SERVICE_DATABASE_URL start executor punctual-executor "$EXECUTOR_ADDR"
if [ -f "$run/demo-sink.pid" ] && kill -0 "$(cat "$run/demo-sink.pid")" 2>/dev/null; then
  echo "demo-sink already running"
else
  nohup "$root/target/debug/punctual-demo-sink" >>"$run/logs/demo-sink.log" 2>&1 &
  echo $! >"$run/demo-sink.pid"
fi

say "creating the demo timer"
body='{"namespace":"demo","name":"every-5-seconds","schedule":{"cron":"*/5 * * * * *"},
       "action":{"http":{"method":"POST","url":"http://'"$SINK_ADDR"'/demo","body":{"hello":"punctual"}}}}'
answer=$(curl -sS "${auth[@]}" -w '\n%{http_code}' -H 'content-type: application/json' -d "$body" "http://$ADMIN_ADDR/v1/timers")
code=$(tail -n1 <<<"$answer")
if [ "$code" = 201 ]; then
  id=$(head -n -1 <<<"$answer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  echo "created timer $id"
elif [ "$code" = 409 ]; then
  id=$(curl -fsS "${auth[@]}" "http://$ADMIN_ADDR/v1/timers?namespace=demo" |
    python3 -c 'import json,sys; print([t["id"] for t in json.load(sys.stdin)["timers"] if t["name"]=="every-5-seconds"][0])')
  echo "demo timer exists already: $id"
  # Point it at this run's demo sink, should the address have changed since.
  patch=$(curl -fsS "${auth[@]}" "http://$ADMIN_ADDR/v1/timers/$id" | python3 -c '
import json, sys
t = json.load(sys.stdin); url = "http://'"$SINK_ADDR"'/demo"
if t["action"]["http"]["url"] != url:
    t["action"]["http"]["url"] = url
    print(json.dumps({"revision": t["revision"], "action": t["action"]}))')
  if [ -n "$patch" ]; then
    curl -fsS "${auth[@]}" -X PATCH -H 'content-type: application/json' -d "$patch" "http://$ADMIN_ADDR/v1/timers/$id" >/dev/null
    echo "demo timer now calls http://$SINK_ADDR/demo"
  fi
else
  echo "creating the demo timer failed (HTTP $code):"; head -n -1 <<<"$answer"; exit 1
fi
echo "$id" >"$run/demo-timer.id"

say "waiting for the demo timer to fire"
for _ in $(seq 1 40); do
  ok=$(curl -fsS "${auth[@]}" "http://$ADMIN_ADDR/v1/timers/$id/runs?status=succeeded&limit=1" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["runs"]))')
  [ "$ok" -ge 1 ] && break
  sleep 0.5
done
curl -fsS "${auth[@]}" "http://$ADMIN_ADDR/v1/timers/$id/runs?status=succeeded&limit=2" | python3 -m json.tool

cat <<INFO

Punctual is up.
API key: $API_KEY
  (an admin key, kept in ${run}/api-key; send it as Authorization: Bearer <key>)
Secret key: kept in ${run}/secret-key (PUNCTUAL_SECRET_KEY: it seals the stored secrets; keep it)
  Console          http://$ADMIN_ADDR/console/  (sign in with the API key above)
  CLI              export PUNCTUAL_ADDR=http://$ADMIN_ADDR PUNCTUAL_API_KEY=\$(cat ${run}/api-key)
                   target/debug/punctual timer list; target/debug/punctual run list --timer $id
  Admin API        http://$ADMIN_ADDR/v1/timers
  Demo timer runs  curl -s -H "Authorization: Bearer \$(cat ${run}/api-key)" http://$ADMIN_ADDR/v1/timers/$id/runs | python3 -m json.tool
  Metrics          http://$ADMIN_ADDR/metrics  http://$SCANNER_ADDR/metrics  http://$EXECUTOR_ADDR/metrics
  Postgres         psql -h 127.0.0.1 -p $PG_PORT -U postgres punctual
  Logs             .run/logs/
Stop everything with: make down
INFO
