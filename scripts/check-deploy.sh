#!/usr/bin/env bash
# Checks the deployment files offline: both Compose files against the Compose
# specification's schema, and the Kubernetes manifests (deploy/kubernetes) against the API
# schemas of pinned Kubernetes versions, which kubernetes-validate carries with it. The
# checkers (pinned) live in a virtualenv in the cache; nothing is fetched once they are in.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE_DIR=${PUNCTUAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/punctual}
VENV="$CACHE_DIR/pytools"
CHECK_JSONSCHEMA_VERSION=0.39.0
KUBERNETES_VALIDATE_VERSION=1.37.0
# The oldest Kubernetes the manifests are for, and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS=(1.31.0 1.37.0)

if ! "$VENV/bin/check-jsonschema" --version 2>/dev/null | grep -q "$CHECK_JSONSCHEMA_VERSION" \
  || ! "$VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "$KUBERNETES_VALIDATE_VERSION"; then
  python3 -m venv "$VENV" 2>/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$VENV"
  }
  "$VENV/bin/pip" install -q "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi

# Compose: the main file, and the cluster file with its profile `scale`.
"$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml docker-compose.cluster.yml

# Kubernetes: every manifest but kustomization.yaml (not an API object), strictly (an
# unknown field is an error). kubernetes-validate only warns about a kind or apiVersion it
# has no schema for (a typo, or an API removed): such a warning fails here too.
manifests=()
for f in deploy/kubernetes/*.yaml; do
  [[ $(basename "$f") == kustomization.yaml ]] || manifests+=("$f")
done
version_args=()
for v in "${KUBERNETES_VERSIONS[@]}"; do version_args+=(-k "$v"); done
if ! out=$("$VENV/bin/kubernetes-validate" --strict --quiet "${version_args[@]}" "${manifests[@]}" 2>&1) \
  || grep -q . <<<"$out"; then
  printf '%s\n' "$out" >&2
  echo "kubernetes-validate: the manifests of deploy/kubernetes do not validate" >&2
  exit 1
fi
echo "kubernetes-validate $KUBERNETES_VALIDATE_VERSION: ${manifests[*]} valid for Kubernetes ${KUBERNETES_VERSIONS[*]}"

# What no schema knows: kustomization.yaml lists exactly the manifests (each holding at
# least one object), every PUNCTUAL_* variable named in a deployment file is a setting of
# docs/configuration.md (generated from the code; the services ignore unknown ones) or one
# of runtime's telemetry variables (docs/monitoring.md), and the executors' termination
# grace period exceeds their drain timeout.
"$VENV/bin/python" - "${manifests[@]}" <<'EOF'
import glob, os, re, sys
import yaml

errors = []
manifests = sys.argv[1:]
docs = {m: [d for d in yaml.safe_load_all(open(m)) if d] for m in manifests}
kustomization = yaml.safe_load(open("deploy/kubernetes/kustomization.yaml"))
listed = sorted(kustomization.get("resources") or [])
present = sorted(os.path.basename(m) for m in manifests)
if listed != present:
    errors.append(f"deploy/kubernetes/kustomization.yaml lists {listed}; the folder has {present}")
errors += [f"{m}: no object" for m, d in docs.items() if not d]

settings = set(re.findall(r"^\| `(PUNCTUAL_[A-Z0-9_]+)`", open("docs/configuration.md").read(), re.M))
# PUNCTUAL_LOG_FORMAT and PUNCTUAL_OTLP_ENDPOINT: read by every service outside its settings.
for f in ("runtime/src/telemetry.rs", "runtime/src/otlp.rs"):
    settings |= set(re.findall(r'^pub const \w+: &str = "(PUNCTUAL_[A-Z0-9_]+)";', open(f).read(), re.M))
for path in manifests + sorted(glob.glob("docker-compose*.yml")):
    for name in sorted(set(re.findall(r"\bPUNCTUAL_[A-Z0-9_]+", open(path).read())) - settings):
        errors.append(f"{path}: {name} is neither a setting in docs/configuration.md nor a telemetry variable")

objects = [o for d in docs.values() for o in d]
config = {k: v for o in objects if o.get("kind") == "ConfigMap" for k, v in (o.get("data") or {}).items()}
for o in objects:
    for c in (o.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []):
        if "punctual-executor" in (c.get("command") or []):
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            drain_ms = int(env.get("PUNCTUAL_DRAIN_TIMEOUT_MS") or config.get("PUNCTUAL_DRAIN_TIMEOUT_MS") or 10_000)
            grace_s = o["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
            if grace_s * 1000 <= drain_ms:
                errors.append(f"{o['kind']} {o['metadata']['name']}: terminationGracePeriodSeconds {grace_s} "
                              f"does not exceed PUNCTUAL_DRAIN_TIMEOUT_MS {drain_ms}")
if errors:
    sys.exit("\n".join(errors))
print("deploy/kubernetes: kustomization, settings and grace period consistent")
EOF
