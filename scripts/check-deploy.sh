#!/usr/bin/env bash
# Checks the deployment files offline: both Compose files against the Compose
# specification's schema. The checker (pinned) lives in a virtualenv in the cache.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE_DIR=${PUNCTUAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/punctual}
VENV="$CACHE_DIR/pytools"
CHECK_JSONSCHEMA_VERSION=0.39.0

if ! "$VENV/bin/check-jsonschema" --version 2>/dev/null | grep -q "$CHECK_JSONSCHEMA_VERSION"; then
  python3 -m venv "$VENV" 2>/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$VENV"
  }
  "$VENV/bin/pip" install -q "check-jsonschema==$CHECK_JSONSCHEMA_VERSION"
fi

"$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml docker-compose.cluster.yml
