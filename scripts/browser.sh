#!/usr/bin/env bash
# What the console's browser tests need: Debian's Chromium and ChromeDriver (installed with
# apt-get when missing: tools that download a browser of their own cannot here) and
# axe-core, pinned in tests/browser/package-lock.json, from the npm registry.
#
#   scripts/browser.sh tools    installs what is missing; prints the axe-core script's path
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
log() { echo "[browser] $*" >&2; }

case "${1:-}" in
  tools)
    missing=()
    command -v chromium >/dev/null || missing+=(chromium)
    command -v chromedriver >/dev/null || missing+=(chromium-driver)
    command -v npm >/dev/null || missing+=(nodejs npm)
    if [ ${#missing[@]} -gt 0 ]; then
      if [ "$(id -u)" != 0 ]; then log "please install: ${missing[*]}"; exit 1; fi
      log "apt-get install ${missing[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    axe="$root/tests/browser/node_modules/axe-core/axe.min.js"
    want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["packages"]["node_modules/axe-core"]["version"])' \
      tests/browser/package-lock.json)
    have=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
      tests/browser/node_modules/axe-core/package.json 2>/dev/null || true)
    if [ "$have" != "$want" ] || [ ! -f "$axe" ]; then
      log "npm ci (axe-core $want)"
      (cd tests/browser && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
    fi
    echo "$axe"
    ;;
  *)
    echo "usage: scripts/browser.sh tools" >&2
    exit 2
    ;;
esac
