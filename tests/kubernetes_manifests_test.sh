#!/usr/bin/env bash
# deploy/kubernetes/'s manifests, without a cluster: each is read by kubectl, then its pods are
# held to the hardening the README promises. `kubectl apply --dry-run=client --validate=false`
# still asks an API server which kinds exist (discovery), so with none answering (an empty
# kubeconfig whose dummy cluster refuses) kubectl parses each file with `label --local`, which
# needs no server. Run by CTest: kubernetes_manifests_test.sh SOURCE_DIR WORK_DIR; prints
# SKIPPED without kubectl or python3's yaml.
set -euo pipefail
source=$1 work=$2
command -v kubectl >/dev/null || { echo "SKIPPED: no kubectl (Debian package kubernetes-client)"; exit 0; }
/usr/bin/python3 -c 'import yaml' 2>/dev/null || { echo "SKIPPED: no python3-yaml"; exit 0; }
rm -rf "$work"
mkdir -p "$work"
cat >"$work/kubeconfig" <<'KUBECONFIG'
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: none, context: {cluster: none}}]
current-context: none
users: []
KUBECONFIG
export KUBECONFIG=$work/kubeconfig

manifests=("$source"/deploy/kubernetes/*.yaml)
for manifest in "${manifests[@]}"; do
  name=$(basename "$manifest")
  if kubectl apply --dry-run=client --validate=false -o yaml -f "$manifest" \
    >"$work/$name" 2>"$work/$name.err"; then
    echo "$name: kubectl apply --dry-run=client: ok"
  elif kubectl label --local --dry-run=client -o yaml -f "$manifest" checked=yes \
    >"$work/$name" 2>>"$work/$name.err"; then
    echo "$name: kubectl read it (no API server for apply's discovery)"
  else
    cat "$work/$name.err" >&2
    echo "FAILED: kubectl cannot read $name" >&2
    exit 1
  fi
done

/usr/bin/python3 - "$work" "${manifests[@]##*/}" <<'PYTHON'
import sys, yaml
work, names = sys.argv[1], sys.argv[2:]
objects = [doc for name in names for doc in yaml.safe_load_all(open(f"{work}/{name}")) if doc]
by_kind = {o["kind"]: o for o in objects}
problems = []
def check(condition, text):
    if not condition:
        problems.append(text)

daemon = by_kind["DaemonSet"]["spec"]["template"]["spec"]
worker = by_kind["Pod"]["spec"]
for label, pod in (("DaemonSet", daemon), ("worker Pod", worker)):
    check(not pod.get("hostPID") and not pod.get("hostIPC") and not pod.get("hostNetwork"),
          f"{label}: hostPID, hostIPC or hostNetwork")
    check(pod["securityContext"].get("seccompProfile", {}).get("type") == "RuntimeDefault",
          f"{label}: no RuntimeDefault seccomp profile")
    for container in pod["containers"]:
        context = container.get("securityContext", {})
        check(not context.get("privileged"), f"{label}/{container['name']}: privileged")
        check(context.get("allowPrivilegeEscalation") is False,
              f"{label}/{container['name']}: privilege escalation allowed")
        check(context.get("readOnlyRootFilesystem") is True,
              f"{label}/{container['name']}: writable root filesystem")
        check(context.get("capabilities", {}).get("drop") == ["ALL"],
              f"{label}/{container['name']}: capabilities not all dropped")
        check(not context.get("capabilities", {}).get("add"),
              f"{label}/{container['name']}: adds capabilities")

gpumemd = daemon["containers"][0]
check("nvidia.com/gpu" not in str(gpumemd.get("resources")),
      "gpumemd requests nvidia.com/gpu: it would take GPUs from the workers")
check("gpumemctl" in str(gpumemd.get("livenessProbe")), "no `gpumemctl ping` liveness probe")
check(daemon.get("nodeSelector") or daemon.get("affinity"), "the DaemonSet is not kept to GPU nodes")
socket_group = daemon["securityContext"]["runAsGroup"]
check(socket_group in worker["securityContext"].get("supplementalGroups", []),
      f"the worker is not in the socket's group {socket_group}")
def host_path(pod):
    return {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
check(host_path(daemon) & host_path(worker), "the worker does not mount the daemon's socket folder")
config = yaml.safe_load(by_kind["ConfigMap"]["data"]["gpumemd.yaml"])
check(config.get("socket", "").startswith(next(iter(host_path(daemon)), "?")),
      "the configured socket is not in the hostPath folder")
check(config.get("socket_mode") == "0660", "the socket is not open to its group (socket_mode 0660)")
if problems:
    sys.exit("FAILED:\n  " + "\n  ".join(problems))
print(f"{len(objects)} objects: hardened as documented")
PYTHON
