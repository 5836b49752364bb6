#!/usr/bin/env python3
"""Checks the deployment files under deploy/ without a cluster or a daemon.

The Kubernetes manifests (deploy/k8s) are parsed as YAML and their required
fields and cross-references checked: every document has apiVersion, kind and
metadata.name; kustomization.yaml lists every manifest; the Deployment runs one
replica with Recreate, its selector matches its pod labels, its UID is the
image's (Dockerfile), every volume mount names a volume, every claim a
PersistentVolumeClaim and every secret a Secret here; the Service selects the
Deployment's pods and targets a declared port. deploy/compose.yaml is parsed
too (docker-compose config, which validates it against Compose's schema, is
run by scripts/image_test.sh). The drain time is the same in the Deployment,
the compose file and the systemd unit.

    scripts/check_deploy_manifests.py      (ctest: deploy_manifests_test)

Exit 77 (ctest SKIP_RETURN_CODE) without python3-yaml.
"""
import pathlib
import re
import sys

try:
    import yaml
except ImportError:
    print("check_deploy_manifests: SKIP: no PyYAML (apt install python3-yaml)")
    sys.exit(77)

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
errors = []


def check(condition, message):
    if not condition:
        errors.append(message)
    return condition


def get(mapping, path, where):
    """mapping[a][b]... for path 'a.b...', or None with an error."""
    value = mapping
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            errors.append(f"{where}: missing {path}")
            return None
        value = value[key]
    return value


def image_uid():
    match = re.search(r"useradd --uid (\d+)", (ROOT / "Dockerfile").read_text())
    check(match, "Dockerfile: no useradd --uid")
    return int(match.group(1)) if match else None


def load_k8s():
    """{(kind, name): (file, document)} of every manifest in deploy/k8s."""
    objects = {}
    k8s = DEPLOY / "k8s"
    kustomization = yaml.safe_load((k8s / "kustomization.yaml").read_text())
    resources = get(kustomization, "resources", "kustomization.yaml") or []
    manifests = sorted(p.name for p in k8s.glob("*.yaml") if p.name != "kustomization.yaml")
    check(sorted(resources) == manifests,
          f"kustomization.yaml lists {sorted(resources)}, the folder has {manifests}")
    for name in manifests:
        for doc in yaml.safe_load_all((k8s / name).read_text()):
            if doc is None:
                continue
            where = f"k8s/{name}"
            kind = get(doc, "kind", where)
            get(doc, "apiVersion", where)
            object_name = get(doc, "metadata.name", where)
            check((kind, object_name) not in objects, f"{where}: {kind} {object_name} twice")
            objects[(kind, object_name)] = (where, doc)
    return objects


def check_deployment(where, doc, objects, uid):
    spec = get(doc, "spec", where) or {}
    check(spec.get("replicas") == 1, f"{where}: replicas must be 1 (one SQLite writer)")
    check(get(spec, "strategy.type", where) == "Recreate", f"{where}: strategy must be Recreate")
    selector = get(spec, "selector.matchLabels", where) or {}
    labels = get(spec, "template.metadata.labels", where) or {}
    check(selector and selector.items() <= labels.items(),
          f"{where}: selector {selector} does not match the pod labels {labels}")
    pod = get(spec, "template.spec", where) or {}
    security = pod.get("securityContext", {})
    check(security.get("runAsNonRoot") is True, f"{where}: runAsNonRoot must be true")
    check(security.get("runAsUser") == uid, f"{where}: runAsUser is not the image's UID {uid}")
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    containers = pod.get("initContainers", []) + (get(pod, "containers", where) or [])
    check(containers, f"{where}: no containers")
    for container in containers:
        cwhere = f"{where}: container {container.get('name')}"
        check(container.get("name") and container.get("image"), f"{cwhere}: needs name and image")
        for mount in container.get("volumeMounts", []):
            check(mount.get("name") in volumes,
                  f"{cwhere}: mount {mount.get('name')} names no volume")
            check(mount.get("mountPath"), f"{cwhere}: mount {mount.get('name')} has no path")
    for name, volume in volumes.items():
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"].get("claimName")
            check(("PersistentVolumeClaim", claim) in objects,
                  f"{where}: volume {name}: no PersistentVolumeClaim {claim}")
        if "secret" in volume:
            secret_name = volume["secret"].get("secretName")
            secret = objects.get(("Secret", secret_name))
            if check(secret, f"{where}: volume {name}: no Secret {secret_name}"):
                keys = set(secret[1].get("stringData", {})) | set(secret[1].get("data", {}))
                for item in volume["secret"].get("items", []):
                    check(item.get("key") in keys,
                          f"{where}: volume {name}: Secret {secret_name} has no key "
                          f"{item.get('key')}")
    server = next((c for c in pod.get("containers", []) if c.get("name") == "fca-server"), None)
    if check(server, f"{where}: no container fca-server"):
        check("--auth" in server.get("args", []), f"{where}: fca-server without --auth")
    return labels, pod


def check_service(where, doc, deployments):
    selector = get(doc, "spec.selector", where) or {}
    matched = [(labels, pod) for labels, pod in deployments
               if selector and selector.items() <= labels.items()]
    if not check(matched, f"{where}: selector {selector} matches no Deployment's pods"):
        return
    declared = set()
    for container in matched[0][1].get("containers", []):
        for port in container.get("ports", []):
            declared |= {port.get("name"), port.get("containerPort")}
    for port in get(doc, "spec.ports", where) or []:
        check(port.get("targetPort", port.get("port")) in declared,
              f"{where}: targetPort {port.get('targetPort')} is no container port")


def check_pvc(where, doc):
    check(get(doc, "spec.accessModes", where), f"{where}: no accessModes")
    get(doc, "spec.resources.requests.storage", where)


def check_compose():
    where = "compose.yaml"
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    service = get(compose, "services.fca-server", where) or {}
    check(service.get("image"), f"{where}: fca-server has no image")
    volumes = service.get("volumes", [])
    check(any(v.endswith(":/models:ro") for v in volumes), f"{where}: /models is not read-only")
    for volume in volumes:
        source = volume.split(":")[0]
        if not source.startswith(("$", ".", "/")):
            check(source in (compose.get("volumes") or {}),
                  f"{where}: named volume {source} is not declared")
    return service.get("stop_grace_period")


def seconds(text):
    match = re.fullmatch(r"(\d+)s?", str(text).strip())
    return int(match.group(1)) if match else None


def main():
    uid = image_uid()
    objects = load_k8s()
    deployments = [check_deployment(where, doc, objects, uid)
                   for (kind, _), (where, doc) in objects.items() if kind == "Deployment"]
    check(len(deployments) == 1, "k8s: not exactly one Deployment")
    for (kind, _), (where, doc) in objects.items():
        if kind == "Service":
            check_service(where, doc, deployments)
        elif kind == "PersistentVolumeClaim":
            check_pvc(where, doc)
    compose_grace = check_compose()
    unit = (DEPLOY / "debian" / "fca-server.service").read_text()
    unit_grace = re.search(r"^TimeoutStopSec=(\S+)", unit, re.M)
    k8s_grace = [doc["spec"]["template"]["spec"].get("terminationGracePeriodSeconds")
                 for (kind, _), (_, doc) in objects.items() if kind == "Deployment"]
    graces = {"compose stop_grace_period": seconds(compose_grace),
              "systemd TimeoutStopSec": seconds(unit_grace.group(1)) if unit_grace else None,
              "k8s terminationGracePeriodSeconds": k8s_grace[0] if k8s_grace else None}
    check(None not in graces.values() and len(set(graces.values())) == 1,
          f"the drain time differs: {graces}")
    for error in errors:
        print(f"check_deploy_manifests: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"check_deploy_manifests: OK ({len(objects)} Kubernetes objects, compose.yaml; "
          f"drain time {graces['compose stop_grace_period']} s everywhere)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
