#!/usr/bin/env bash
# Renders or lints a Helm chart offline, with Helm's own library and no cluster.
#
#   scripts/helm-render.sh CHART [VALUES.yaml...]   the manifests, one YAML stream on stdout
#   scripts/helm-render.sh --lint CHART             Helm's lint of the chart
#
# Rendering is `helm template leasehold CHART -f VALUES…`: later files override earlier ones,
# the chart's values.schema.json checks the result, and a template's `fail` is an error. The
# library is helm-python-sdk from PyPI (Helm's Go SDK behind a C ABI: no helm binary, no Go),
# pinned below and installed into target/tools/helm/ on first use (scripts/lib/pip-tool.sh).
#
# Exit status: 0 rendered (or linted without errors); 1 Helm's message on stderr, or the library
# could not be installed; 2 usage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The library, and the Helm it carries (0.2.2: Helm 4.2.3); `pip index versions
# helm-python-sdk` lists the others.
pin=0.2.2

usage() {
  echo "usage: $0 CHART [VALUES.yaml...] | $0 --lint CHART" >&2
  exit 2
}

[ $# -ge 1 ] || usage
lint=0
if [ "$1" = "--lint" ]; then
  lint=1
  shift
  [ $# -eq 1 ] || usage
fi
for path in "$@"; do
  case "$path" in -*) usage ;; esac
  [ -e "$path" ] || {
    echo "helm-render: $path: no such file or directory" >&2
    exit 1
  }
done

. "$root/scripts/lib/pip-tool.sh"
venv=$(pip_tool helm "helm-python-sdk==$pin" 'import helm_python')

# Helm notes each symbolic link it follows on stderr (the chart's files/ link to the examples'
# alert rules and dashboard, so that there is one copy of each): kept off, the rest passes.
err=$(mktemp)
trap 'rm -f "$err"' EXIT
status=0
"$venv/bin/python" - "$lint" "$@" 2>"$err" <<'PY' || status=$?
import sys
import helm_python as helm

lint, chart, files = sys.argv[1] == "1", sys.argv[2], sys.argv[3:]
if lint:
    report = helm.lint(chart)
    for m in report["messages"]:
        print("%s: %s" % (m["path"], m["error"]), file=sys.stderr)
    sys.exit(1 if report["errors"] else 0)

def merge(into, over):
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into

values = {}
for path in files:
    with open(path) as f:
        merge(values, helm.values_from_yaml(f.read()) or {})
try:
    manifests = helm.Chart.load(chart).render(values=values, name="leasehold")
except helm.HelmError as e:
    sys.exit("helm-render: %s" % e)
for path in sorted(manifests):
    text = manifests[path].strip()
    if text and path.endswith((".yaml", ".yml")):
        print("---\n# Source: %s\n%s" % (path, text))
PY
grep -v 'INFO found symbolic link in path' "$err" >&2 || true
exit "$status"
