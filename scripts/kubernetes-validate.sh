#!/usr/bin/env bash
# Checks Kubernetes manifests offline against the API's own schemas.
#
#   scripts/kubernetes-validate.sh FILE...    every document of every FILE, strictly
#
# The validator is kubernetes-validate from PyPI, which ships the JSON schemas of every
# Kubernetes release it knows, so a check needs no cluster and no network. It is pinned below and
# installed into a virtual environment under target/tools/kubernetes-validate/ on first use
# (idempotent: reinstalled only when the pin changes or the environment is broken;
# scripts/lib/pip-tool.sh).
#
# Objects of the Prometheus Operator (monitoring.coreos.com/v1: ServiceMonitor, PrometheusRule)
# are not in the API's schemas: they are checked against the operator's own CRDs as the PyPI
# package cloudcoil-models-prometheus-operator models them (pinned below, in an environment of its
# own), just as strictly.
#
# Strict means: a field the schema does not know is an error (a misspelt `runAsNonroot` would
# otherwise pass, and the API server would drop it or refuse the object), an object whose kind or
# apiVersion has no schema is an error (the validator alone only warns), a mapping that repeats a
# key is an error (YAML keeps the last one silently, `kubectl apply --validate=strict` refuses
# it), and a FILE without any object is an error.
#
# Exit status: 0 valid; 1 invalid (the validator's message on stderr) or the validator could not
# be installed; 2 usage.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The validator and its schemas; `pip index versions kubernetes-validate` lists the others.
pin=1.37.0
# The Prometheus Operator's CRDs as models (0.80.1.0: the operator's v0.80.1, whose
# monitoring.coreos.com/v1 fields have been stable since 2024).
operator_pin=0.80.1.0
# The Kubernetes release the manifests are checked against: 1.31, the oldest release on which
# every field examples/kubernetes/ sets is generally available (the PodDisruptionBudget's
# unhealthyPodEvictionPolicy went GA in 1.31), and still within the support windows of the
# managed services. Checking the oldest release meant to run the manifests, rather than the
# newest, catches a field that only newer API servers know. KUBERNETES_VERSION overrides it.
kubernetes_version=${KUBERNETES_VERSION:-1.31.0}

say() { echo "kubernetes-validate: $*" >&2; }
die() {
  say "$*"
  exit 1
}
usage() {
  echo "usage: $0 FILE..." >&2
  exit 2
}

[ $# -ge 1 ] || usage
for file in "$@"; do
  case "$file" in -*) usage ;; esac
  [ -f "$file" ] || die "$file: no such file"
done

. "$root/scripts/lib/pip-tool.sh"
venv=$(pip_tool kubernetes-validate "kubernetes-validate==$pin" 'import kubernetes_validate, yaml')

# Splits one file's documents, loaded as the validator loads them but refusing repeated keys,
# into DIR/core.yaml (the API's own kinds) and DIR/operator.yaml (monitoring.coreos.com); prints
# how many went to each. Empty documents (a file's leading comment block) are not counted.
split() {
  "$venv/bin/python" - "$1" "$2" <<'PY'
import os, sys, yaml

class Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    "found the key %r twice" % (key,), key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

path, out = sys.argv[1], sys.argv[2]
try:
    with open(path) as f:
        docs = [d for d in yaml.load_all(f, Loader=Loader) if d is not None]
except yaml.YAMLError as e:
    sys.exit("%s: %s" % (path, e))
def operator(d):
    return isinstance(d, dict) and str(d.get("apiVersion", "")).startswith("monitoring.coreos.com/")
parts = {"core": [d for d in docs if not operator(d)], "operator": [d for d in docs if operator(d)]}
for name, part in parts.items():
    with open(os.path.join(out, name + ".yaml"), "w") as f:
        yaml.safe_dump_all(part, f, sort_keys=False)
print(len(parts["core"]), len(parts["operator"]))
PY
}

# Checks DIR/operator.yaml against the operator's models, every model refusing a field it does
# not know (the models ignore them by default, as the API server prunes them).
operator_check() {
  local models
  models=$(pip_tool prometheus-operator-models \
    "cloudcoil-models-prometheus-operator==$operator_pin" \
    'import cloudcoil.models.prometheus_operator.v1') || return 1
  "$models/bin/python" - "$1" <<'PY'
import sys, yaml
import cloudcoil.pydantic
# Before the models are defined, so that every one of them inherits it.
cloudcoil.pydantic.BaseModel.model_config["extra"] = "forbid"
from cloudcoil.models.prometheus_operator import v1

failed = 0
with open(sys.argv[1]) as f:
    for doc in yaml.safe_load_all(f):
        name = "%s %s" % (doc.get("kind"), (doc.get("metadata") or {}).get("name"))
        model = getattr(v1, str(doc.get("kind")), None)
        if doc.get("apiVersion") != "monitoring.coreos.com/v1" or model is None:
            print("ERROR %s: no model for %s" % (name, doc.get("apiVersion")), file=sys.stderr)
            failed = 1
            continue
        try:
            model.model_validate(doc)
        except Exception as e:
            print("ERROR %s: %s" % (name, e), file=sys.stderr)
            failed = 1
sys.exit(failed)
PY
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=0
for file in "$@"; do
  if ! counts=$(split "$file" "$work" 2>&1); then
    echo "$counts" >&2
    failed=1
    continue
  fi
  read -r count crds <<<"$counts"
  if [ "$crds" -gt 0 ] && ! operator_check "$work/operator.yaml"; then
    say "$file: a Prometheus Operator object is invalid"
    failed=1
    continue
  fi
  if [ $((count + crds)) -eq 0 ]; then
    say "$file: no Kubernetes object in it"
    failed=1
    continue
  fi
  # The validator prints one line per object: INFO when it passed, WARN when no schema was
  # found (kind or apiVersion unknown to that release), ERROR or FATAL otherwise.
  status=0
  report=""
  [ "$count" -eq 0 ] || report=$("$venv/bin/kubernetes-validate" --strict \
    --kubernetes-version "$kubernetes_version" "$work/core.yaml" 2>&1) || status=$?
  passed=$(grep -c '^INFO ' <<<"$report" || true)
  if [ "$status" -ne 0 ] || [ "$passed" -ne "$count" ]; then
    grep -v '^INFO ' <<<"$report" >&2 || true
    [ "$status" -ne 0 ] || say "$file: $passed of $count objects passed"
    failed=1
  else
    echo "$file: $count objects valid against Kubernetes $kubernetes_version (strict)$(
      [ "$crds" -eq 0 ] || echo ", $crds against the Prometheus Operator's CRDs")"
  fi
done
exit "$failed"
