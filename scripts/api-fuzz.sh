#!/usr/bin/env bash
# The admin API under schemathesis (pinned, from PyPI): the admin, built, runs against a
# database of its own on the Postgres server of PUNCTUAL_TEST_DATABASE_URL, and
# schemathesis sends it generated requests, valid and invalid, to every operation of its
# /openapi.json (tests/schemathesis/schemathesis.toml says which checks). Fails on any
# 5xx, undocumented status or content type, or answer that violates the schema.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

: "${PUNCTUAL_TEST_DATABASE_URL:?the Postgres server to use (scripts/test.sh sets it)}"
CACHE_DIR=${PUNCTUAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/punctual}
VENV="$CACHE_DIR/schemathesis"
SCHEMATHESIS_VERSION=4.32.5

if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  python3 -m venv "$VENV" 2>/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$VENV"
  }
  "$VENV/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION"
fi

work=$(mktemp -d /tmp/punctual-fuzz.XXXXXX)
db="fuzz_$(date +%s)_$$"
admin_pid=
cleanup() {
  [ -n "$admin_pid" ] && kill "$admin_pid" 2>/dev/null && wait "$admin_pid" 2>/dev/null || true
  psql "$PUNCTUAL_TEST_DATABASE_URL/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$PUNCTUAL_TEST_DATABASE_URL/postgres" -qc "CREATE DATABASE $db"

port=$(scripts/stack.sh free-port)
key="pct_$(python3 -c 'import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode())')"
# Requests come as fast as schemathesis sends them, some with broken keys: no rate limits
# here (they have tests of their own). Loopback callbacks stay refused, as by default.
PUNCTUAL_DATABASE_URL="$PUNCTUAL_TEST_DATABASE_URL/$db" PUNCTUAL_ADMIN_ADDR="127.0.0.1:$port" \
  PUNCTUAL_BOOTSTRAP_API_KEY="$key" PUNCTUAL_API_RATE_LIMIT=0 PUNCTUAL_API_FAILED_AUTH_LIMIT=0 RUST_LOG=warn \
  "$root/target/debug/punctual-admin" >"$work/admin.log" 2>&1 &
admin_pid=$!
for _ in $(seq 1 150); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$admin_pid" 2>/dev/null || { cat "$work/admin.log"; exit 1; }
  sleep 0.2
done

# schemathesis keeps its state in the folder it runs in: a temporary one.
status=0
(cd "$work" && PUNCTUAL_FUZZ_API_KEY="$key" "$VENV/bin/schemathesis" \
  --config-file "$root/tests/schemathesis/schemathesis.toml" \
  run "http://127.0.0.1:$port/openapi.json") || status=$?
if [ "$status" != 0 ]; then
  echo "api-fuzz: schemathesis found problems (exit $status); the admin's log:"
  grep -v '^\s*$' "$work/admin.log" | tail -n 40
  exit "$status"
fi
if grep -q '"level":"ERROR"\|ERROR' "$work/admin.log"; then
  echo "api-fuzz: the admin logged errors:"; grep 'ERROR' "$work/admin.log" | head -20; exit 1
fi
echo "api-fuzz: ok"
