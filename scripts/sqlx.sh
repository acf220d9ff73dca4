#!/usr/bin/env bash
# The offline data of the compile-time checked SQL (`sqlx::query!` and friends): `.sqlx/`,
# committed, from which every build checks its statements without a database.
#
#   scripts/sqlx.sh tool               install sqlx-cli (pinned) unless it is there
#   scripts/sqlx.sh prepare [SERVER]   write .sqlx/ afresh (after changing a statement or a migration)
#   scripts/sqlx.sh check [SERVER]     fail if .sqlx/ is not what the statements and the migrations give
#
# SERVER is a Postgres URL without a database (postgres://user@host:port); the script
# migrates a database of its own there and drops it after. Without SERVER it starts a
# Postgres of its own in a temporary folder and removes it after.
set -euo pipefail
cd "$(dirname "$0")/.."

# The version of the sqlx crate in Cargo.lock: the macros and the CLI must agree on the
# format of .sqlx/.
SQLX_CLI_VERSION=0.8.6

tool() {
  if ! sqlx --version 2>/dev/null | grep -q " $SQLX_CLI_VERSION\$"; then
    echo "[sqlx] installing sqlx-cli $SQLX_CLI_VERSION (once; cached in ~/.cargo/bin)"
    cargo install --quiet --locked sqlx-cli --version "$SQLX_CLI_VERSION" \
      --no-default-features --features rustls,postgres
  fi
}

mode=${1:-}
case "$mode" in
  tool) tool; exit 0 ;;
  prepare | check) ;;
  *) echo "usage: scripts/sqlx.sh tool | prepare [SERVER] | check [SERVER]" >&2; exit 2 ;;
esac
tool

server=${2:-} work= ours=
drop() { sqlx database drop -y >/dev/null 2>&1 || true; }
cleanup() {
  [ -z "$ours" ] || drop
  [ -z "$work" ] || scripts/stack.sh pg-purge "$work" >/dev/null 2>&1 || true
}
trap cleanup EXIT
if [ -z "$server" ]; then
  work=$(mktemp -d /tmp/punctual-sqlx.XXXXXX)
  port=$(scripts/stack.sh free-port)
  scripts/stack.sh pg-start "$work" "$port" >/dev/null
  server="postgres://postgres@127.0.0.1:$port"
fi
export DATABASE_URL="$server/punctual_sqlx_$$"
ours=1
drop
sqlx database create
sqlx migrate run --source migrations >/dev/null

if [ "$mode" = prepare ]; then
  cargo sqlx prepare --workspace -- --all-targets
elif ! cargo sqlx prepare --workspace --check -- --all-targets; then
  echo "[sqlx] .sqlx/ is stale: a statement or a migration changed. Run 'make sqlx-prepare' and commit .sqlx/." >&2
  exit 1
fi
