#!/usr/bin/env python3
"""tests/k8s/validate.py - checks fabrik-csi's Kubernetes deployment files (run by validate.sh).

  1. Lints the Helm chart deploy/helm/fabrik-csi (Helm v4's own linter, strict) with its default
     values and with each values file of tests/k8s/.
  2. Renders the chart (Helm v4's engine, no cluster) with the default values and each values
     file, and proves that values.schema.json and the templates refuse bad values.
  3. Validates every rendered document and every document of deploy/k8s/*.yaml against the
     Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields are errors) of each
     version of $K8S_VERSIONS; a kind without a schema is an error too.
  4. Asserts what the driver needs of each set (see check_set): the CSIDriver, the
     StorageClasses, the controller's arguments (one --box=URL[,rack=R][,drives=A-B] per box,
     ...), csi-provisioner's (--timeout of at least MIN_PROVISIONER_TIMEOUT s), the node plugin
     (privileged, Bidirectional kubelet dir, host paths, racks), RBAC, and that the plain
     manifests equal the chart rendered with its defaults (labels aside).

Exits 1 on any problem, after a one-line summary.
"""
import functools
import os
import re
import sys
import urllib.parse

import yaml

import helm_python as helm
import kubernetes_validate.utils as kv

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "fabrik-csi")
PLAIN = os.path.join(REPO, "deploy", "k8s")
TESTS = os.path.join(REPO, "tests", "k8s")
K8S_VERSIONS = os.environ.get("K8S_VERSIONS", "1.30 1.37").split()
DRIVER = "csi.fabrik.io"
RACK_KEY = "topology.fabrik.io/rack"
RACK_LABEL = "fabrik.io/rack"  # the selector label of a rack's node DaemonSet
SOCKET = "/csi/csi.sock"
CA_DIR = "/etc/fabrik-csi/ca"

# Renders: (label, values file or None, release name, namespace)
RENDERS = [
    ("chart defaults", None, "fabrik-csi", "fabrik-csi"),
    ("values-racks.yaml", "values-racks.yaml", "fabrik-csi", "fabrik-csi"),
    ("values-ca-secret.yaml", "values-ca-secret.yaml", "edge", "storage"),
]

NAMESPACED = {"ServiceAccount", "Role", "RoleBinding", "Deployment", "DaemonSet", "Secret", "ConfigMap"}
CLUSTER_SCOPED = {"Namespace", "CSIDriver", "StorageClass", "ClusterRole", "ClusterRoleBinding"}

CSIDRIVER_SPEC = {
    "attachRequired": True,
    "podInfoOnMount": False,
    "volumeLifecycleModes": ["Persistent"],
    "fsGroupPolicy": "File",
    "storageCapacity": True,
}
# The least member count of each RAID level (target/src/raid/layout.rs, check_members).
MIN_DRIVES = {"raid0": 1, "raid1": 2, "raid5": 3, "raid6": 4, "raid10": 4}
MAX_DRIVES = 32
FSTYPES = {"ext4", "xfs"}
PROVISIONER_ARGS = [
    "--feature-gates=Topology=true",
    "--leader-election",
    "--extra-create-metadata",
    "--default-fstype=ext4",
    "--enable-capacity",
    "--capacity-ownerref-level=2",
]
# csi-provisioner's --timeout (default 10 s) must outlast making a big volume: the box erases
# the volume's capacity before CreateVolume returns.
MIN_PROVISIONER_TIMEOUT = 120
# What the controller's ServiceAccount must be allowed (upstream sidecars' RBAC).
NEEDED_CLUSTER = [
    ("", "persistentvolumes", "get list watch create patch delete"),
    ("", "persistentvolumeclaims", "get list watch update"),
    ("storage.k8s.io", "storageclasses", "get list watch"),
    ("", "events", "list watch create update patch"),
    ("storage.k8s.io", "csinodes", "get list watch"),
    ("", "nodes", "get list watch"),
    ("storage.k8s.io", "volumeattachments", "get list watch patch"),
    ("storage.k8s.io", "volumeattachments/status", "patch"),
]
NEEDED_NAMESPACED = [
    ("coordination.k8s.io", "leases", "get watch list delete update create"),
    ("storage.k8s.io", "csistoragecapacities", "get list watch create update patch delete"),
    ("", "pods", "get"),
    ("apps", "replicasets", "get"),
]
IMAGE_RE = re.compile(r"^[^\s:@/]+(:[0-9]+)?(/[^\s:@/]+)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DRIVES = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")  # a box's drives=: FIRST-LAST or one ID
DURATION = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")


def seconds(duration):
    """Seconds of a Go duration of h/m/s units (300s, 5m, 1h30m), or None."""
    m = DURATION.match(duration or "")
    if not duration or not m:
        return None
    h, mi, sec = (int(x or 0) for x in m.groups())
    return h * 3600 + mi * 60 + sec


class Report:
    def __init__(self):
        self.problems = []
        self.checks = 0
        self.documents = 0

    def check(self, ok, where, message):
        self.checks += 1
        if not ok:
            self.problems.append(f"{where}: {message}")
            print(f"  FAIL {where}: {message}")
        return ok

    def fail(self, where, message):
        return self.check(False, where, message)


R = Report()


# ------------------------------------------------------------------ YAML
class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one)."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_docs(text, where):
    """[(where#n, doc)] of a YAML stream; a parse error is a problem."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=StrictLoader) if d is not None]
    except yaml.YAMLError as e:
        R.fail(where, f"YAML: {e}")
        return []
    out = []
    for i, d in enumerate(docs):
        w = f"{where}#{i + 1}" if len(docs) > 1 else where
        if not isinstance(d, dict):
            R.fail(w, "document is not a mapping")
            continue
        name = (d.get("metadata") or {}).get("name", "?")
        out.append((f"{w} {d.get('kind', '?')}/{name}", d))
    return out


# ------------------------------------------------------------------ schemas
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


def validate_schema(where, doc):
    R.documents += 1
    for field in ("apiVersion", "kind"):
        if not R.check(isinstance(doc.get(field), str), where, f"no {field}"):
            return
    if not R.check(isinstance((doc.get("metadata") or {}).get("name"), str), where, "no metadata.name"):
        return
    for version in K8S_VERSIONS:
        try:
            kv.validate(doc, version, strict=True)
            R.check(True, where, "")
        except kv.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(top)"
            R.fail(where, f"Kubernetes {version} schema: {path}: {e.message}")
        except kv.SchemaNotFoundError as e:
            R.fail(where, f"Kubernetes {version}: no schema for {doc['apiVersion']} {doc['kind']} "
                          f"(misspelt kind or apiVersion?): {e.message}")
        except kv.VersionNotSupportedError:
            R.fail(where, f"kubernetes-validate has no Kubernetes {version} "
                          f"(it has {', '.join(kv.all_versions())})")
            return


# ------------------------------------------------------------------ expectations
def fullname(values, release):
    if values.get("fullnameOverride"):
        return values["fullnameOverride"][:63].rstrip("-")
    name = values.get("nameOverride") or "fabrik-csi"
    return (release if name in release else f"{release}-{name}")[:63].rstrip("-")


def image_ref(image, default_tag=None):
    return f"{image['repository']}:{image.get('tag') or default_tag}"


def expect_from_values(v, release, namespace, app_version):
    """What a render (or the plain manifests, against the defaults) must contain."""
    full = fullname(v, release)
    boxes = []
    for b in v["boxes"]:
        boxes.append(f"--box={b['url']}" + (f",rack={b['rack']}" if b.get("rack") else "")
                     + (f",drives={b['drives']}" if b.get("drives") else ""))
    ca = v.get("apiCA") or {}
    key = ca.get("key") or "ca.crt"
    if ca.get("pem"):
        ca_source = ("configMap", f"{full}-api-ca", key)
    elif ca.get("existingSecret"):
        ca_source = ("secret", ca["existingSecret"], key)
    elif ca.get("existingConfigMap"):
        ca_source = ("configMap", ca["existingConfigMap"], key)
    else:
        ca_source = None
    sc = v["sidecars"]
    classes = []
    for c in v.get("storageClasses") or []:
        classes.append({
            "name": c["name"], "level": c["level"], "drives": str(c["drives"]),
            "fstype": c.get("fsType") or "ext4", "reclaimPolicy": c.get("reclaimPolicy") or "Delete",
            "isDefault": bool(c.get("isDefault")), "racks": c.get("racks") or [],
            "mountOptions": c.get("mountOptions") or [], "extra": c.get("extraParameters") or {},
        })
    racks = []
    for r in v["node"].get("racks") or []:
        racks.append((r["name"], r.get("nodeSelector") or {RACK_KEY: r["name"]}))
    return {
        "release": release, "ns": namespace, "fullname": full, "boxes": boxes,
        "token": (v["apiToken"]["secretName"], v["apiToken"]["secretKey"], v["apiToken"].get("value") or ""),
        "ca": ca_source, "ca_pem": ca.get("pem") or "",
        "images": {
            "fabrik-csi": image_ref(v["image"], app_version),
            "csi-provisioner": image_ref(sc["provisioner"]),
            "csi-attacher": image_ref(sc["attacher"]),
            "node-driver-registrar": image_ref(sc["nodeDriverRegistrar"]),
            "liveness-probe": image_ref(sc["livenessProbe"]),
        },
        "replicas": v["controller"].get("replicas", 1),
        "controller_port": v["controller"]["healthPort"],
        "controller_extra": v["controller"].get("extraArgs") or [],
        "provisioner_extra": v["controller"].get("provisionerExtraArgs") or [],
        "provisioner_timeout": v["controller"].get("provisionerTimeout"),
        "node_port": v["node"]["healthPort"],
        "node_extra": v["node"].get("extraArgs") or [],
        "node_selector": v["node"].get("nodeSelector") or {},
        "node_tolerations": v["node"].get("tolerations") or [],
        "kubelet": v["node"].get("kubeletDir") or "/var/lib/kubelet",
        "racks": racks, "classes": classes, "log": v.get("logLevel") or "info",
        "pull_secrets": [s["name"] for s in v.get("imagePullSecrets") or []],
    }


# ------------------------------------------------------------------ helpers
def containers(pod):
    return {c.get("name"): c for c in pod.get("containers") or []}


def env_of(c):
    return {e.get("name"): e for e in c.get("env") or []}


def expand(arg, c):
    """$(VAR) of an argument from the container's literal env values."""
    env = env_of(c)
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: str(env.get(m.group(1), {}).get("value", m.group(0))), arg)


def field_ref(c, name):
    return (((env_of(c).get(name) or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")


def volume_for(pod, c, mount_path):
    """(mount, volume) mounted at mount_path in container c."""
    for m in c.get("volumeMounts") or []:
        if m.get("mountPath") == mount_path:
            for vol in pod.get("volumes") or []:
                if vol.get("name") == m.get("name"):
                    return m, vol
            return m, None
    return None, None


def host_path(vol):
    return ((vol or {}).get("hostPath") or {}).get("path")


def flag_values(args, flag):
    return [a[len(flag) + 1:] for a in args if a.startswith(flag + "=")]


def check_pod_generic(where, obj, idx, ns):
    """What the API server would refuse, or what would fail at run time, in any workload."""
    spec = obj.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    R.check(sel and all(labels.get(k) == v for k, v in sel.items()), where,
            f"selector {sel} does not match the pod template's labels {labels}")
    sa = pod.get("serviceAccountName")
    R.check(("ServiceAccount", ns, sa) in idx, where, f"serviceAccountName {sa!r} is not among the objects")
    names = [c.get("name") for c in pod.get("containers") or []]
    R.check(len(names) == len(set(names)), where, f"container names repeat: {names}")
    vols = [v.get("name") for v in pod.get("volumes") or []]
    R.check(len(vols) == len(set(vols)), where, f"volume names repeat: {vols}")
    for c in pod.get("containers") or []:
        cw = f"{where} container {c.get('name')}"
        image = c.get("image", "")
        R.check(bool(IMAGE_RE.match(image)) and not image.endswith(":latest"), cw,
                f"image {image!r} is not registry/repository:tag with a fixed tag")
        env_names = set(env_of(c))
        for a in (c.get("command") or []) + (c.get("args") or []):
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                R.check(var in env_names, cw, f"argument {a!r} refers to $({var}), not in its env")
        paths = [m.get("mountPath") for m in c.get("volumeMounts") or []]
        R.check(len(paths) == len(set(paths)), cw, f"mount paths repeat: {paths}")
        for m in c.get("volumeMounts") or []:
            R.check(m.get("name") in vols, cw, f"volumeMount {m.get('name')!r} has no volume")
            if m.get("mountPropagation") == "Bidirectional":
                R.check((c.get("securityContext") or {}).get("privileged") is True, cw,
                        "Bidirectional mount propagation needs a privileged container")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        probe = ((c.get("livenessProbe") or {}).get("httpGet") or {}).get("port")
        if isinstance(probe, str):
            R.check(probe in ports, cw, f"liveness probe port {probe!r} is not a named port")


def check_controller(where, dep, exp, idx):
    spec = dep.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    cs = containers(pod)
    R.check(spec.get("replicas") == exp["replicas"], where, f"replicas {spec.get('replicas')} != {exp['replicas']}")
    R.check(set(cs) == {"fabrik-csi", "csi-provisioner", "csi-attacher", "liveness-probe"}, where,
            f"containers {sorted(cs)}")
    R.check(pod.get("serviceAccountName") == f"{exp['fullname']}-controller", where,
            f"serviceAccountName {pod.get('serviceAccountName')!r}")
    R.check([s.get("name") for s in pod.get("imagePullSecrets") or []] == exp["pull_secrets"], where,
            "imagePullSecrets differ from the values")
    for name, c in cs.items():
        if name in exp["images"]:
            R.check(c.get("image") == exp["images"][name], f"{where} {name}",
                    f"image {c.get('image')!r} != {exp['images'][name]!r}")
        m, vol = volume_for(pod, c, "/csi")
        R.check(vol is not None and "emptyDir" in vol, f"{where} {name}",
                "does not mount the shared emptyDir socket volume at /csi")
    drv = cs.get("fabrik-csi")
    if drv:
        args = drv.get("args") or []
        w = f"{where} fabrik-csi"
        R.check(args.count(f"--endpoint=unix://{SOCKET}") == 1, w, f"no single --endpoint=unix://{SOCKET} in {args}")
        boxes = [a for a in args if a == "--box" or a.startswith("--box=") or a.startswith("--box ")]
        R.check(boxes == exp["boxes"], w, f"--box arguments {boxes} != one per configured box {exp['boxes']}")
        for b in boxes:
            url, *parts = b[len("--box="):].split(",")
            u = urllib.parse.urlparse(url)
            R.check(u.scheme in ("http", "https") and bool(u.hostname), w, f"{b}: not an http(s) URL")
            keys = [p.partition("=")[0] for p in parts]
            R.check(keys in ([], ["rack"], ["drives"], ["rack", "drives"]), w,
                    f"{b}: the suffix is not [,rack=NAME][,drives=FIRST-LAST] in that order")
            for p in parts:
                key, _, val = p.partition("=")
                if key == "rack":
                    R.check(bool(DNS_LABEL.match(val)), w, f"{b}: rack={val} is not a DNS label")
                elif key == "drives":
                    m = DRIVES.match(val)
                    R.check(bool(m) and int(m.group(1)) <= int(m.group(2) or m.group(1)), w,
                            f"{b}: drives={val} is not FIRST-LAST (or one ID) of numeric drive IDs, first <= last")
        cas = flag_values(args, "--ca")
        if exp["ca"]:
            kind, name, key = exp["ca"]
            R.check(cas == [f"{CA_DIR}/{key}"], w, f"--ca {cas} != {CA_DIR}/{key}")
            m, vol = volume_for(pod, drv, CA_DIR)
            src = (vol or {}).get(kind) or {}
            R.check(src.get("name" if kind == "configMap" else "secretName") == name, w,
                    f"{CA_DIR} is not mounted from {kind} {name}")
            R.check(bool(m and m.get("readOnly")), w, f"{CA_DIR} is not mounted read-only")
            if exp["ca_pem"]:
                cm = idx.get(("ConfigMap", exp["ns"], name))
                R.check(cm is not None and exp["ca_pem"].strip() == ((cm or {}).get("data") or {}).get(key, "").strip(),
                        w, f"ConfigMap {name} does not hold the CA under {key}")
        else:
            R.check(cas == [] and volume_for(pod, drv, CA_DIR) == (None, None), w, "--ca without a CA configured")
        for a in exp["controller_extra"]:
            R.check(a in args, w, f"extra argument {a!r} missing")
        tok = ((env_of(drv).get("FABRIK_API_TOKEN") or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        sname, skey, inline = exp["token"]
        R.check((tok.get("name"), tok.get("key")) == (sname, skey), w,
                f"FABRIK_API_TOKEN comes from {tok}, not Secret {sname} key {skey}")
        secret = idx.get(("Secret", exp["ns"], sname))
        if inline:
            data = {**((secret or {}).get("data") or {}), **((secret or {}).get("stringData") or {})}
            R.check(secret is not None and data.get(skey) == inline, w,
                    f"the inline token is not in a rendered Secret {sname} key {skey}")
        elif not exp.get("plain"):
            R.check(secret is None, w, f"Secret {sname} rendered although no inline token is set")
        R.check((env_of(drv).get("RUST_LOG") or {}).get("value") == exp["log"], w, "RUST_LOG differs from logLevel")
        ports = {p.get("name"): p.get("containerPort") for p in drv.get("ports") or []}
        R.check(ports.get("healthz") == exp["controller_port"], w, f"healthz port {ports} != {exp['controller_port']}")
    lp = cs.get("liveness-probe")
    if lp:
        a = lp.get("args") or []
        R.check(f"--csi-address={SOCKET}" in a and f"--http-endpoint=:{exp['controller_port']}" in a,
                f"{where} liveness-probe", f"args {a}")
    prov = cs.get("csi-provisioner")
    if prov:
        w = f"{where} csi-provisioner"
        a = prov.get("args") or []
        for want in PROVISIONER_ARGS + exp["provisioner_extra"]:
            R.check(want in a, w, f"{want} missing from {a}")
        timeouts = flag_values(a, "--timeout")
        t = seconds(timeouts[0]) if len(timeouts) == 1 else None
        if R.check(len(timeouts) == 1 and t is not None, w,
                   f"no single --timeout=DURATION (s/m/h units) in {a}: the default 10s is too short"):
            R.check(t >= MIN_PROVISIONER_TIMEOUT, w,
                    f"--timeout={timeouts[0]} is under {MIN_PROVISIONER_TIMEOUT}s (making a big volume erases it)")
            R.check(timeouts[0] == exp["provisioner_timeout"], w,
                    f"--timeout={timeouts[0]} != controller.provisionerTimeout {exp['provisioner_timeout']!r}")
        R.check([expand(x, prov) for x in flag_values(a, "--csi-address")] == [SOCKET], w,
                f"--csi-address is not {SOCKET}")
        R.check(field_ref(prov, "POD_NAME") == "metadata.name", w, "env POD_NAME is not fieldRef metadata.name")
        R.check(field_ref(prov, "NAMESPACE") == "metadata.namespace", w,
                "env NAMESPACE is not fieldRef metadata.namespace")
    att = cs.get("csi-attacher")
    if att:
        a = att.get("args") or []
        R.check("--leader-election" in a, f"{where} csi-attacher", "--leader-election missing")
        R.check([expand(x, att) for x in flag_values(a, "--csi-address")] == [SOCKET], f"{where} csi-attacher",
                f"--csi-address is not {SOCKET}")


def check_node(where, ds, exp, rack):
    spec = ds.get("spec") or {}
    tmpl = spec.get("template") or {}
    pod = tmpl.get("spec") or {}
    cs = containers(pod)
    kubelet = exp["kubelet"]
    plugin_dir = f"{kubelet}/plugins/{DRIVER}"
    R.check(pod.get("hostNetwork") is True, where, "hostNetwork is not true")
    R.check(pod.get("dnsPolicy") == "ClusterFirstWithHostNet", where, "dnsPolicy is not ClusterFirstWithHostNet")
    R.check(not pod.get("hostPID"), where, "hostPID is set (not needed)")
    R.check(pod.get("serviceAccountName") == f"{exp['fullname']}-node", where,
            f"serviceAccountName {pod.get('serviceAccountName')!r}")
    R.check(pod.get("tolerations", []) == exp["node_tolerations"], where, "tolerations differ from the values")
    R.check(set(cs) == {"fabrik-csi", "node-driver-registrar", "liveness-probe"}, where, f"containers {sorted(cs)}")
    for name, c in cs.items():
        if name in exp["images"]:
            R.check(c.get("image") == exp["images"][name], f"{where} {name}",
                    f"image {c.get('image')!r} != {exp['images'][name]!r}")
        m, vol = volume_for(pod, c, "/csi")
        R.check(host_path(vol) == plugin_dir, f"{where} {name}", f"/csi is not the host's {plugin_dir}")
    sel = pod.get("nodeSelector") or {}
    for k, v in exp["node_selector"].items():
        R.check(sel.get(k) == v, where, f"nodeSelector lacks {k}={v}")
    drv = cs.get("fabrik-csi")
    if drv:
        w = f"{where} fabrik-csi"
        args = drv.get("args") or []
        R.check((drv.get("securityContext") or {}).get("privileged") is True, w, "not privileged")
        R.check(args.count(f"--endpoint=unix://{SOCKET}") == 1, w, f"no single --endpoint=unix://{SOCKET}")
        R.check(flag_values(args, "--node-id") == ["$(NODE_NAME)"], w, "no --node-id=$(NODE_NAME)")
        R.check(field_ref(drv, "NODE_NAME") == "spec.nodeName", w, "env NODE_NAME is not fieldRef spec.nodeName")
        R.check((env_of(drv).get("RUST_LOG") or {}).get("value") == exp["log"], w, "RUST_LOG differs from logLevel")
        for a in exp["node_extra"]:
            R.check(a in args, w, f"extra argument {a!r} missing")
        if rack:
            rname, rsel = rack
            R.check(flag_values(args, "--rack") == [rname], w, f"--rack is not {rname}")
            for k, v in rsel.items():
                R.check(sel.get(k) == v, w, f"rack {rname}'s nodeSelector lacks {k}={v}")
            R.check(((spec.get("selector") or {}).get("matchLabels") or {}).get(RACK_LABEL) == rname, w,
                    f"the selector has no {RACK_LABEL}={rname} (rack DaemonSets would share pods)")
        else:
            R.check(flag_values(args, "--rack") == [], w, "--rack without racks configured")
        m, vol = volume_for(pod, drv, kubelet)
        R.check(bool(m) and m.get("mountPropagation") == "Bidirectional", w,
                f"the kubelet dir {kubelet} is not mounted with Bidirectional propagation")
        R.check(host_path(vol) == kubelet, w, f"{kubelet} is not the host's {kubelet}")
        for path, ro in (("/dev", False), ("/sys", False), ("/lib/modules", True), ("/etc/nvme", False)):
            m, vol = volume_for(pod, drv, path)
            R.check(host_path(vol) == path, w, f"{path} is not the host's {path}")
            if ro:
                R.check(bool(m and m.get("readOnly")), w, f"{path} is not read-only")
        ports = {p.get("name"): p.get("containerPort") for p in drv.get("ports") or []}
        R.check(ports.get("healthz") == exp["node_port"], w, f"healthz port {ports} != {exp['node_port']}")
    reg = cs.get("node-driver-registrar")
    if reg:
        w = f"{where} node-driver-registrar"
        a = reg.get("args") or []
        R.check(flag_values(a, "--csi-address") == [SOCKET], w, f"--csi-address is not {SOCKET}")
        R.check(flag_values(a, "--kubelet-registration-path") == [f"{plugin_dir}/csi.sock"], w,
                f"--kubelet-registration-path is not {plugin_dir}/csi.sock")
        m, vol = volume_for(pod, reg, "/registration")
        R.check(host_path(vol) == f"{kubelet}/plugins_registry", w,
                f"/registration is not the host's {kubelet}/plugins_registry")
    lp = cs.get("liveness-probe")
    if lp:
        a = lp.get("args") or []
        R.check(f"--csi-address={SOCKET}" in a and f"--http-endpoint=:{exp['node_port']}" in a,
                f"{where} liveness-probe", f"args {a}")


def allows(rules, group, resource, verb):
    for r in rules:
        if ((group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
                and (resource in r.get("resources", []) or "*" in r.get("resources", []))
                and (verb in r.get("verbs", []) or "*" in r.get("verbs", []))):
            return True
    return False


def check_rbac(label, idx, exp):
    ns = exp["ns"]
    ctl = ("ServiceAccount", ns, f"{exp['fullname']}-controller")
    node = ("ServiceAccount", ns, f"{exp['fullname']}-node")
    cluster_rules, ns_rules, node_bound = [], [], []
    for (kind, bns, name), obj in idx.items():
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        w = f"{label} {kind}/{name}"
        ref = obj.get("roleRef") or {}
        R.check(ref.get("apiGroup") == "rbac.authorization.k8s.io", w, "roleRef.apiGroup")
        role = idx.get((ref.get("kind"), bns if ref.get("kind") == "Role" else None, ref.get("name")))
        R.check(role is not None, w, f"roleRef {ref.get('kind')}/{ref.get('name')} is not among the objects")
        for s in obj.get("subjects") or []:
            key = ("ServiceAccount", s.get("namespace"), s.get("name"))
            R.check(s.get("kind") == "ServiceAccount" and key in idx, w, f"subject {s} is not among the objects")
            if key == ctl and role:
                (cluster_rules if kind == "ClusterRoleBinding" else ns_rules).extend(role.get("rules") or [])
            if key == node:
                node_bound.append(name)
    for kind in ("ClusterRole", "Role"):
        for (k, _, name), obj in idx.items():
            if k == kind:
                for r in obj.get("rules") or []:
                    R.check("*" not in r.get("verbs", []) + r.get("resources", []) + r.get("apiGroups", []),
                            f"{label} {kind}/{name}", f"wildcard in rule {r}")
    for group, resource, verbs in NEEDED_CLUSTER:
        for verb in verbs.split():
            R.check(allows(cluster_rules, group, resource, verb), f"{label} RBAC",
                    f"the controller may not {verb} {resource} ({group or 'core'}) cluster-wide")
    for group, resource, verbs in NEEDED_NAMESPACED:
        for verb in verbs.split():
            R.check(allows(cluster_rules + ns_rules, group, resource, verb), f"{label} RBAC",
                    f"the controller may not {verb} {resource} ({group or 'core'}) in {ns}")
    R.check(not node_bound, f"{label} RBAC", f"the node plugin's ServiceAccount is bound by {node_bound}")


def check_set(label, docs, exp):
    """docs: [(where, doc)] of one deployment (a render, or the plain manifests)."""
    idx = {}
    for where, d in docs:
        kind, meta = d.get("kind"), d.get("metadata") or {}
        if kind in NAMESPACED:
            R.check(meta.get("namespace") == exp["ns"], where, f"namespace {meta.get('namespace')!r} != {exp['ns']!r}")
            key = (kind, meta.get("namespace"), meta.get("name"))
        elif kind in CLUSTER_SCOPED:
            R.check("namespace" not in meta, where, "a cluster-scoped object with a namespace")
            key = (kind, None, meta.get("name"))
        else:
            R.fail(where, f"unexpected kind {kind!r}")
            continue
        R.check(key not in idx, where, f"{kind}/{meta.get('name')} is defined twice")
        idx[key] = d
    of = lambda kind: [(k[2], o) for k, o in idx.items() if k[0] == kind]  # noqa: E731

    drivers = of("CSIDriver")
    if R.check(len(drivers) == 1, label, f"{len(drivers)} CSIDriver objects, not 1"):
        name, drv = drivers[0]
        R.check(name == DRIVER, f"{label} CSIDriver", f"name {name!r} != {DRIVER!r}")
        R.check(drv.get("spec") == CSIDRIVER_SPEC, f"{label} CSIDriver", f"spec {drv.get('spec')} != {CSIDRIVER_SPEC}")

    classes = dict(of("StorageClass"))
    R.check(sorted(classes) == sorted(c["name"] for c in exp["classes"]), label,
            f"StorageClasses {sorted(classes)} != {sorted(c['name'] for c in exp['classes'])}")
    for c in exp["classes"]:
        sc = classes.get(c["name"])
        if sc is None:
            continue
        w = f"{label} StorageClass/{c['name']}"
        p = sc.get("parameters") or {}
        R.check(sc.get("provisioner") == DRIVER, w, f"provisioner {sc.get('provisioner')!r} != CSIDriver {DRIVER!r}")
        R.check(sc.get("volumeBindingMode") == "WaitForFirstConsumer", w, "volumeBindingMode")
        R.check(sc.get("allowVolumeExpansion") is False, w, "allowVolumeExpansion is not false")
        R.check(sc.get("reclaimPolicy") == c["reclaimPolicy"], w, f"reclaimPolicy {sc.get('reclaimPolicy')!r}")
        level, drives = p.get("level"), p.get("drives")
        R.check(level in MIN_DRIVES and level == c["level"], w, f"level {level!r}")
        ok = isinstance(drives, str) and re.fullmatch(r"[1-9][0-9]*", drives) is not None
        if R.check(ok and drives == c["drives"], w, f"drives {drives!r} is not the string {c['drives']!r}") \
                and level in MIN_DRIVES:
            n = int(drives)
            R.check(MIN_DRIVES[level] <= n <= MAX_DRIVES and not (level == "raid10" and n % 2), w,
                    f"{level} of {n} drives cannot be made")
        fst = p.get("csi.storage.k8s.io/fstype")
        R.check(fst in FSTYPES and fst == c["fstype"], w, f"fstype {fst!r}")
        known = {"level", "drives", "csi.storage.k8s.io/fstype", *c["extra"]}
        R.check(set(p) <= known, w, f"unknown parameters {sorted(set(p) - known)}")
        default = (sc.get("metadata", {}).get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class")
        R.check((default == "true") == c["isDefault"], w, "is-default-class annotation differs from isDefault")
        R.check((sc.get("mountOptions") or []) == c["mountOptions"], w, "mountOptions")
        topo = [v for t in sc.get("allowedTopologies") or [] for e in t.get("matchLabelExpressions") or []
                if e.get("key") == RACK_KEY for v in e.get("values") or []]
        R.check(topo == c["racks"], w, f"allowedTopologies racks {topo} != {c['racks']}")

    deps = dict(of("Deployment"))
    if R.check(list(deps) == [f"{exp['fullname']}-controller"], label, f"Deployments {list(deps)}"):
        check_controller(f"{label} Deployment/{exp['fullname']}-controller", deps[f"{exp['fullname']}-controller"],
                         exp, idx)
    dss = dict(of("DaemonSet"))
    want = {f"{exp['fullname']}-node-{r}": (r, s) for r, s in exp["racks"]} or {f"{exp['fullname']}-node": None}
    if R.check(sorted(dss) == sorted(want), label, f"DaemonSets {sorted(dss)} != {sorted(want)}"):
        for name, rack in want.items():
            check_node(f"{label} DaemonSet/{name}", dss[name], exp, rack)
    for (kind, ns, name), obj in idx.items():
        if kind in ("Deployment", "DaemonSet"):
            check_pod_generic(f"{label} {kind}/{name}", obj, idx, exp["ns"])
    check_rbac(label, idx, exp)
    return idx


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in b:
                out.append(f"{path}.{k}: only in the plain manifest")
            elif k not in a:
                out.append(f"{path}.{k}: only in the chart")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: plain {a!r} != chart {b!r}")


def strip_meta(doc):
    d = dict(doc)
    d["metadata"] = {k: v for k, v in (doc.get("metadata") or {}).items() if k not in ("labels", "annotations")}
    return d


# ------------------------------------------------------------------ main
def main():
    print(f"Helm {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__}), kubernetes-validate "
          f"{kv.__version__} (Kubernetes {kv.all_versions()[0]}..{kv.all_versions()[-1]}); "
          f"validating against {', '.join(K8S_VERSIONS)}")
    for v in K8S_VERSIONS:
        if v not in [kv.major_minor(x) for x in kv.all_versions()]:
            R.fail("K8S_VERSIONS", f"kubernetes-validate has no schemas for Kubernetes {v}")
    chart = helm.Chart.load(CHART)
    app_version = chart.metadata.get("appVersion")
    R.check(chart.metadata.get("apiVersion") == "v2", "Chart.yaml", "apiVersion is not v2")
    R.check(bool(app_version), "Chart.yaml", "no appVersion")
    rendered = {}
    n_rendered = 0

    # 1-2. lint, render, schema and checks of each values set
    for label, vfile, release, ns in RENDERS:
        values = {}
        if vfile:
            with open(os.path.join(TESTS, vfile)) as f:
                values = helm.values_from_yaml(f.read())
        print(f"chart: {label} (release {release}, namespace {ns})")
        lint = helm.lint(CHART, values, strict=True, namespace=ns, kube_version=f"v{K8S_VERSIONS[0]}.0")
        for m in lint.get("messages") or []:
            R.check(m.get("severity", 3) < 2, f"helm lint [{label}] {m.get('path')}", m.get("error", "").strip())
        for e in lint.get("errors") or []:
            R.fail(f"helm lint [{label}]", e.strip())
        try:
            out = chart.render(values, name=release, namespace=ns, is_install=True)
        except helm.HelmError as e:
            R.fail(f"helm render [{label}]", str(e).strip())
            continue
        merged = chart.merge_values(values)
        exp = expect_from_values(merged, release, ns, app_version)
        docs = []
        for path in sorted(out):
            base = os.path.basename(path)
            if base == "NOTES.txt" or base.startswith("_"):
                continue
            docs += load_docs(out[path], f"[{label}] {path.split('/templates/', 1)[-1]}")
        for where, d in docs:
            validate_schema(where, d)
        n_rendered += len(docs)
        check_set(f"[{label}]", docs, exp)
        rendered[label] = (docs, exp)

    # values the chart must refuse (schema) or fail to render (template checks)
    bad = [
        ("no box", {"boxes": []}),
        ("a box URL without a scheme", {"boxes": [{"url": "box-a.example:8443"}]}),
        ("a box URL with a comma", {"boxes": [{"url": "https://box-a.example,rack=x"}]}),
        ("a rack that is not a DNS label", {"boxes": [{"url": "https://box-a.example", "rack": "Rack_A"}]}),
        ("drives that are not numeric", {"boxes": [{"url": "https://box-a.example", "drives": "1-x"}]}),
        ("drives with a comma", {"boxes": [{"url": "https://box-a.example", "drives": "00-05,rack=x"}]}),
        ("drives given as a number", {"boxes": [{"url": "https://box-a.example", "drives": 5}]}),
        ("drives whose first is past the last", {"boxes": [{"url": "https://box-a.example", "drives": "11-00"}]}),
        ("a provisioner timeout without a unit", {"controller": {"provisionerTimeout": "300"}}),
        ("an empty provisioner timeout", {"controller": {"provisionerTimeout": ""}}),
        ("--timeout in provisionerExtraArgs", {"controller": {"provisionerExtraArgs": ["--timeout=60s"]}}),
        ("a misspelt top-level key", {"boxs": [{"url": "https://box-a.example"}]}),
        ("an unknown RAID level", {"storageClasses": [{"name": "x", "level": "raid4", "drives": 4}]}),
        ("0 drives", {"storageClasses": [{"name": "x", "level": "raid0", "drives": 0}]}),
        ("a misspelt StorageClass key", {"storageClasses": [{"name": "x", "level": "raid0", "drives": 1,
                                                             "fstype": "xfs"}]}),
        ("an unknown fsType", {"storageClasses": [{"name": "x", "level": "raid0", "drives": 1, "fsType": "btrfs"}]}),
        ("a sidecar without a tag", {"sidecars": {"attacher": {"tag": ""}}}),
        ("raid5 of 2 drives", {"storageClasses": [{"name": "x", "level": "raid5", "drives": 2}]}),
        ("raid10 of 5 drives", {"storageClasses": [{"name": "x", "level": "raid10", "drives": 5}]}),
        ("two CA sources", {"apiCA": {"pem": "x", "existingSecret": "y"}}),
        ("a rack DaemonSet name too long", {"node": {"racks": [{"name": "r" * 41}]}}),
    ]
    for what, values in bad:
        try:
            chart.render(values, name="fabrik-csi", namespace="fabrik-csi", is_install=True)
            R.fail("chart", f"values with {what} render without an error")
        except (helm.HelmValuesError, helm.HelmRenderError):
            R.check(True, "chart", "")
    print(f"chart: {len(bad)} sets of bad values refused")
    chart.close()

    # 3. the plain manifests
    print("plain manifests: deploy/k8s/*.yaml")
    files = sorted(glob_yaml(PLAIN))
    plain_docs, example_secret, namespace_doc = [], None, None
    for path in files:
        rel = os.path.relpath(path, REPO)
        with open(path) as f:
            docs = load_docs(f.read(), rel)
        for where, d in docs:
            if d.get("kind") == "Kustomization":
                listed = d.get("resources") or []
                want = sorted(os.path.basename(p) for p in files
                              if os.path.basename(p) not in ("kustomization.yaml", "secret-example.yaml"))
                R.check(sorted(listed) == want, where, f"resources {listed} != the manifests {want}")
                continue
            validate_schema(where, d)
            if os.path.basename(path) == "secret-example.yaml":
                example_secret = (where, d)
            elif d.get("kind") == "Namespace":
                namespace_doc = (where, d)
            else:
                plain_docs.append((where, d))
    defaults = helm.Chart.load(CHART)
    default_values = defaults.merge_values({})
    defaults.close()
    exp = expect_from_values(default_values, "fabrik-csi", "fabrik-csi", app_version)
    exp["plain"] = True
    idx = check_set("[plain]", plain_docs, exp)
    if R.check(namespace_doc is not None, "[plain]", "no Namespace object"):
        where, ns = namespace_doc
        R.check(ns["metadata"]["name"] == exp["ns"], where, "the Namespace is not the objects' namespace")
        R.check((ns["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce") == "privileged",
                where, "the namespace does not admit the privileged node plugin (pod-security enforce)")
    if R.check(example_secret is not None, "[plain]", "no secret-example.yaml Secret"):
        where, s = example_secret
        sname, skey, _ = exp["token"]
        data = {**(s.get("data") or {}), **(s.get("stringData") or {})}
        R.check(s["metadata"].get("name") == sname and s["metadata"].get("namespace") == exp["ns"] and skey in data,
                where, f"is not the Secret {sname} (key {skey}) the controller reads")
        R.check("REPLACE" in str(data.get(skey, "")), where, "the token is not the placeholder (a real token?)")
    with open(os.path.join(PLAIN, "Dockerfile")) as f:
        dockerfile = f.read()
    R.check(re.search(r"^FROM debian:bookworm-slim\b", dockerfile, re.M) is not None, "deploy/k8s/Dockerfile",
            "not FROM debian:bookworm-slim")
    for pkg in ("nvme-cli", "e2fsprogs", "xfsprogs", "util-linux"):
        R.check(re.search(rf"apt-get install[^\n]*(\\\n[^\n]*)*\b{pkg}\b", dockerfile) is not None,
                "deploy/k8s/Dockerfile", f"does not install {pkg}")
    R.check(re.search(r"^COPY fabrik-csi ", dockerfile, re.M) is not None, "deploy/k8s/Dockerfile",
            "does not COPY the fabrik-csi binary")

    # 4. the plain manifests against the chart's defaults
    if "chart defaults" in rendered:
        chart_idx = {}
        for where, d in rendered["chart defaults"][0]:
            meta = d.get("metadata") or {}
            chart_idx[(d.get("kind"), meta.get("namespace"), meta.get("name"))] = d
        R.check(sorted(map(str, idx)) == sorted(map(str, chart_idx)), "[plain vs chart]",
                f"objects differ: only plain {sorted(map(str, set(idx) - set(chart_idx)))}, "
                f"only chart {sorted(map(str, set(chart_idx) - set(idx)))}")
        for key in sorted(set(idx) & set(chart_idx), key=str):
            out = []
            diff(strip_meta(idx[key]), strip_meta(chart_idx[key]), f"{key[0]}/{key[2]}", out)
            R.check(not out, "[plain vs chart defaults]", "; ".join(out[:6]) + (" ..." if len(out) > 6 else ""))

    n_plain = R.documents - n_rendered
    result = "all passed" if not R.problems else f"{len(R.problems)} FAILED"
    print(f"k8s: {R.documents} documents ({n_plain} plain, {n_rendered} rendered from {len(RENDERS)} value "
          f"sets) validated against Kubernetes {', '.join(K8S_VERSIONS)} (strict); {R.checks} checks, {result}")
    return 1 if R.problems else 0


def glob_yaml(d):
    return [os.path.join(d, f) for f in os.listdir(d) if f.endswith((".yaml", ".yml"))]


if __name__ == "__main__":
    sys.exit(main())
