#!/usr/bin/env bash
# Checks the monitoring files offline: the Prometheus configuration and alert rules
# (deploy/prometheus) with promtool, the rules' unit tests (alerts.test.yml), and the
# Grafana dashboards (deploy/grafana/dashboards): valid JSON, the `datasource` and
# `instance` variables, unique panel ids, a query in every panel, every query on the
# `datasource` variable, valid PromQL, rate windows of $__rate_interval, and only metrics
# listed in deploy/grafana/metric-names.txt (the services' metrics contract). Also that each
# alert has a severity, a runbook in docs/operations.md, and unit tests firing and silent.
# Prints one line per check passed; fails at the first check that does not pass.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null; then
  if [[ $(id -u) == 0 ]]; then
    echo "promtool missing: installing Debian's prometheus package (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "promtool is missing: install Prometheus's promtool (Debian/Ubuntu: apt-get install prometheus)" >&2
    exit 1
  fi
fi

run() {
  local out
  if ! out=$("$@" 2>&1); then
    printf '%s\n' "$out" >&2
    echo "FAILED: $*" >&2
    exit 1
  fi
  echo "ok: $*"
}

run promtool check config deploy/prometheus/prometheus.yml
run promtool check rules deploy/prometheus/alerts.yml
run promtool test rules deploy/prometheus/alerts.test.yml

# The dashboards' and rules' structure; it writes every dashboard query, its variables
# replaced, as a recording rule into $exprs for promtool to parse.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exprs="$tmp/dashboard-queries.yml"
python3 - "$exprs" <<'EOF'
import glob, json, re, sys

errors = []
def fail(msg):
    errors.append(msg)

allowed = set()
for line in open("deploy/grafana/metric-names.txt"):
    line = line.strip()
    if line and not line.startswith("#"):
        allowed.add(line)

METRIC = re.compile(r"\b(?:punctual|process)_[a-z_]+")
def unknown_metrics(text):
    """Metric names in text that metric-names.txt does not list (histograms' series allowed)."""
    found, unknown = set(), set()
    for name in METRIC.findall(text):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name in allowed:
            found.add(name)
        elif base in allowed:
            found.add(base)
        else:
            unknown.add(name)
    return found, unknown

DS = {"type": "prometheus", "uid": "${datasource}"}
queries = []
dashboards = sorted(glob.glob("deploy/grafana/dashboards/*.json"))
if not dashboards:
    fail("no dashboard in deploy/grafana/dashboards")
used_everywhere = set()
uids = {}
for path in dashboards:
    try:
        board = json.load(open(path))
    except ValueError as e:
        fail(f"{path}: not valid JSON: {e}")
        continue
    before = len(errors)
    uid = board.get("uid")
    if not uid:
        fail(f"{path}: no uid")
    elif uid in uids:
        fail(f"{path}: uid {uid} already used by {uids[uid]}")
    else:
        uids[uid] = path
    if board.get("schemaVersion") != 39:
        fail(f"{path}: schemaVersion {board.get('schemaVersion')}, expected 39")

    variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail(f"{path}: no variable `datasource` of type datasource, query prometheus")
    inst = variables.get("instance")
    if not inst:
        fail(f"{path}: no variable `instance`")
    else:
        q = inst.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if inst.get("type") != "query" or not q or "instance" not in q:
            fail(f"{path}: variable `instance` is not a query for instance label values")
        if not (inst.get("multi") and inst.get("includeAll") and inst.get("allValue") == ".*"):
            fail(f"{path}: variable `instance` must be multi-value, with All as `.*`")
        if inst.get("datasource") != DS:
            fail(f"{path}: variable `instance` does not query the `datasource` variable")

    # Panels, those inside rows included.
    panels = []
    def walk(items):
        for p in items:
            panels.append(p)
            walk(p.get("panels") or [])
    walk(board.get("panels") or [])
    ids = [p.get("id") for p in panels]
    for i in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        fail(f"{path}: panel id {i} used {ids.count(i)} times")
    if None in ids:
        fail(f"{path}: a panel without id")

    instance_used = False
    for p in panels:
        where = f"{path}: panel {p.get('id')} \"{p.get('title')}\""
        if p.get("type") == "row":
            if p.get("datasource") not in (None, DS):
                fail(f"{where}: datasource is not ${{datasource}}")
            continue
        if p.get("datasource") != DS:
            fail(f"{where}: datasource {p.get('datasource')!r} is not {DS}")
        targets = p.get("targets") or []
        if not targets:
            fail(f"{where}: no target")
        for t in targets:
            expr = (t.get("expr") or "").strip()
            if not expr:
                fail(f"{where}: target {t.get('refId')} without expr")
                continue
            if t.get("datasource") != DS:
                fail(f"{where}: target {t.get('refId')} datasource {t.get('datasource')!r} is not {DS}")
            for window in re.findall(r"\[([^\]]*)\]", expr):
                if window != "$__rate_interval":
                    fail(f"{where}: range [{window}] instead of [$__rate_interval]")
            if '$instance' in expr:
                instance_used = True
            found, unknown = unknown_metrics(expr)
            used_everywhere |= found
            for name in sorted(unknown):
                fail(f"{where}: metric {name} is not in deploy/grafana/metric-names.txt")
            if not found and not re.search(r"\bup\b", expr):
                fail(f"{where}: query uses no known metric: {expr}")
            concrete = (expr.replace('"$instance"', '".*"').replace("$__rate_interval", "1m"))
            if "$" in concrete:
                fail(f"{where}: unknown variable in {expr}")
            queries.append((where, concrete))
    if not instance_used:
        fail(f"{path}: no query uses $instance")
    if len(errors) == before:
        print(f"ok: {path}: {len(panels)} panels, variables datasource and instance, unique ids, "
              f"every query on ${{datasource}}")

# The alert rules: metrics, severity, annotations, `for` on its own line, a runbook anchor
# in docs/operations.md, and unit tests that see each alert fire and stay silent.
rules_text = open("deploy/prometheus/alerts.yml").read()
rules_code = "\n".join(l for l in rules_text.splitlines() if not l.lstrip().startswith("#"))
found, unknown = unknown_metrics(rules_code)
used_everywhere |= found
for name in sorted(unknown):
    fail(f"deploy/prometheus/alerts.yml: metric {name} is not in deploy/grafana/metric-names.txt")

def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")
anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", open("docs/operations.md").read(), re.M)}

tests_text = open("deploy/prometheus/alerts.test.yml").read()
cases = re.split(r"\beval_time:", tests_text)[1:]
firing, silent = set(), set()
for case in cases:
    case = re.split(r"\n\s*- interval:", case)[0]
    m = re.search(r"alertname:\s*(\w+)", case)
    if not m:
        continue
    (silent if re.search(r"exp_alerts:\s*\[\s*\]", case) else firing).add(m.group(1))

blocks = re.split(r"^\s*- alert:\s*", rules_code, flags=re.M)[1:]
names = []
for block in blocks:
    name = block.split()[0]
    names.append(name)
    where = f"deploy/prometheus/alerts.yml: {name}"
    if not re.search(r"^\s+for:\s*(\d+(ms|[smhdwy]))+\s*$", block, re.M):
        fail(f"{where}: no `for:` on a line of its own")
    if not re.search(r"^\s+severity:\s*(page|ticket)\s*$", block, re.M):
        fail(f"{where}: labels.severity is not page or ticket")
    for key in ("summary", "description"):
        if not re.search(rf"^\s+{key}:", block, re.M):
            fail(f"{where}: no annotation {key}")
    m = re.search(r"^\s+runbook_url:\s*docs/operations\.md#(\S+)\s*$", block, re.M)
    if not m:
        fail(f"{where}: no runbook_url docs/operations.md#...")
    elif m.group(1) not in anchors:
        fail(f"{where}: runbook anchor #{m.group(1)} is not a heading of docs/operations.md")
    if name not in firing:
        fail(f"{where}: no unit test in alerts.test.yml expects it to fire")
    if name not in silent:
        fail(f"{where}: no unit test in alerts.test.yml expects it silent (exp_alerts: [])")
if not names:
    fail("deploy/prometheus/alerts.yml: no alert")
elif len(names) != len(set(names)):
    fail("deploy/prometheus/alerts.yml: an alert name is used twice")

with open(sys.argv[1], "w") as f:
    f.write("groups:\n  - name: dashboard-queries\n    rules:\n")
    for i, (where, expr) in enumerate(queries):
        f.write(f"      # {where}\n      - record: dashboard_query_{i}\n        expr: {json.dumps(expr)}\n")

if errors:
    sys.exit("\n".join(f"FAILED: {e}" for e in errors))
print(f"ok: {len(names)} alerts, each with severity, summary, description, a runbook in "
      f"docs/operations.md, and unit tests firing and silent")
print(f"ok: metrics used, all in deploy/grafana/metric-names.txt: {' '.join(sorted(used_everywhere))}")
EOF

# Every dashboard query parses as PromQL (variables replaced by their All value and 1m).
if ! out=$(promtool check rules "$exprs" 2>&1); then
  printf '%s\n' "$out" >&2
  for rule in $(grep -o 'dashboard_query_[0-9]*' <<<"$out" | sort -u); do
    # The panel (the comment above the rule) and the query.
    grep -B1 -A1 "record: $rule\$" "$exprs" | sed -e 's/^ *# /FAILED: /' -e '/record:/d' -e 's/^ *expr: /  query: /' >&2
  done
  echo "FAILED: a dashboard query is not valid PromQL" >&2
  exit 1
fi
echo "ok: $(grep -c 'record:' "$exprs") dashboard queries are valid PromQL"
