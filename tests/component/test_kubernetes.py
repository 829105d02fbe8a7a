"""contrib/kubernetes/ renders to valid manifests that agree with the product.

Offline: no cluster, no container engine, no kustomize binary. Each overlay
(and the base) is rendered by `kustomize_subset` (the part of kustomize the
files use), then

- the core kinds, and the Ray pods' templates as PodTemplates, are
  validated with kubernetes-validate's schemas of Kubernetes 1.30 and 1.37
  (the newest it ships), in strict mode;
- the RayCluster against KubeRay v1.7.0's CRD schema and the ServiceMonitors
  against Prometheus Operator v0.93.0's, vendored in
  contrib/kubernetes/schemas/, with jsonschema; a field the schema does not
  declare is an error here (the API server would silently prune it);
- the agent's arguments, expanded as Kubernetes expands `$(VAR)`, are a
  `gitops run` that `gitops.cli`'s parser accepts, and agree with the
  RayCluster, the Services, the ServiceMonitors, monitoring/prometheus.yml,
  the Dockerfile's image name and the Secrets' names and keys.
"""

from __future__ import annotations

import re
import shlex
import stat
import subprocess
import tomllib
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pyrage
import pytest
import yaml
from packaging.specifiers import SpecifierSet

from docgen import ROOT
from gitops.cli import build_parser
from gitops.errors import UserError
from gitops.loop.secrets import load_identities
from tests.support.kustomize_subset import load_documents, render

KUBE = ROOT / "contrib" / "kubernetes"
ENVIRONMENTS = ("dev", "staging", "prod")
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
SCHEMAS = {
    ("ray.io/v1", "RayCluster"): KUBE / "schemas" / "ray.io_raycluster_v1.yaml",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): KUBE / "schemas" / "monitoring.coreos.com_servicemonitor_v1.yaml",
}
# `gitops run` flags the manifests pass before this branch's parser has them:
# --environment comes with issue 33's environments (items 1-3).
# Values Kubernetes would give the downward API in a running pod.
POD_FIELDS = {"status.podIP": "10.1.2.3"}

Resource = dict[str, Any]


def renders() -> dict[str, list[Resource]]:
    found = {"base": render(KUBE / "base")}
    found.update({name: render(KUBE / "overlays" / name) for name in ENVIRONMENTS})
    return found


RENDERS = renders()
SECRETS = load_documents(KUBE / "secrets" / "secrets.example.yaml")


def one(resources: list[Resource], kind: str, name: str | None = None) -> Resource:
    (found,) = [r for r in resources if r["kind"] == kind and (name is None or r["metadata"]["name"] == name)]
    return found


def containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers", [])
    yield from pod_spec["containers"]


def pod_templates(resources: list[Resource]) -> Iterator[dict[str, Any]]:
    for resource in resources:
        if resource["kind"] == "RayCluster":
            yield resource["spec"]["headGroupSpec"]["template"]
            yield from (group["template"] for group in resource["spec"]["workerGroupSpecs"])


def pod_specs(resources: list[Resource]) -> Iterator[dict[str, Any]]:
    for template in pod_templates(resources):
        yield template["spec"]


def head_pod(resources: list[Resource]) -> dict[str, Any]:
    spec: dict[str, Any] = one(resources, "RayCluster")["spec"]["headGroupSpec"]["template"]["spec"]
    return spec


def head_container(resources: list[Resource], name: str) -> dict[str, Any]:
    (found,) = [c for c in containers(head_pod(resources)) if c["name"] == name]
    return found


def agent_container(resources: list[Resource]) -> dict[str, Any]:
    return head_container(resources, "agent")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command and args: $(NAME) from the container's env, $$ for $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


def container_env(container: dict[str, Any], resources: list[Resource], namespace: str) -> dict[str, str]:
    """The container's environment as Kubernetes would give it, from the rendered ConfigMaps."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            env[var["name"]] = namespace if path == "metadata.namespace" else POD_FIELDS[path]
        elif "configMapKeyRef" in source:
            reference = source["configMapKeyRef"]
            env[var["name"]] = one(resources, "ConfigMap", reference["name"])["data"][reference["key"]]
        elif "secretKeyRef" in source:
            env[var["name"]] = "secret-value"
    return env


def agent_argv(resources: list[Resource]) -> list[str]:
    agent = agent_container(resources)
    env = container_env(agent, resources, one(resources, "RayCluster")["metadata"].get("namespace", "default"))
    argv = [expand(word, env) for word in [*agent["command"], *agent["args"]]]
    unexpanded = [word for word in argv if "$(" in word]
    assert not unexpanded, f"Kubernetes would leave these as they are: {unexpanded}"
    return argv


def parsed_run(argv: list[str]) -> Namespace:
    """`gitops run`'s parse of argv."""
    assert argv[:2] == ["gitops", "run"]
    return build_parser().parse_args(argv[1:])


def flag(argv: list[str], name: str) -> str:
    (value,) = [word.split("=", 1)[1] for word in argv if word.startswith(name + "=")]
    return value


def container_port(container: dict[str, Any], name: str) -> int:
    (port,) = [p["containerPort"] for p in container.get("ports", []) if p["name"] == name]
    return int(port)


def strict(schema: Any) -> Any:
    """The schema with every field it does not declare refused, as pruning would drop it."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    tightened = {key: strict(value) for key, value in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        tightened["additionalProperties"] = False
    return tightened


def crd_validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    (schema,) = load_documents(SCHEMAS[(api_version, kind)])
    return jsonschema.Draft7Validator(strict(schema))


VALIDATORS = {key: crd_validator(*key) for key in SCHEMAS}


def crd_errors(resource: Resource) -> list[str]:
    validator = VALIDATORS[(resource["apiVersion"], resource["kind"])]
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(resource)]


# --- rendering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_each_overlay_is_the_base_in_its_own_namespace(environment: str) -> None:
    resources = RENDERS[environment]
    kinds = sorted((r["kind"], r["metadata"]["name"]) for r in resources)
    assert kinds == sorted([
        ("Namespace", f"ray-gitops-{environment}"), ("RayCluster", "ray-gitops"),
        ("ConfigMap", "ray-gitops-agent"), ("PersistentVolumeClaim", "ray-gitops-agent-state"),
        ("Service", "ray-gitops-agent"), ("Service", "ray-gitops-proxy"),
        ("ServiceMonitor", "ray-gitops-agent"), ("ServiceMonitor", "ray-gitops-proxy"),
    ])
    for resource in resources:
        if resource["kind"] != "Namespace":
            assert resource["metadata"]["namespace"] == f"ray-gitops-{environment}"
        assert resource["metadata"]["labels"]["app.kubernetes.io/instance"] == f"ray-gitops-{environment}"


def test_no_secret_is_rendered_so_applying_never_overwrites_a_real_one() -> None:
    for resources in RENDERS.values():
        assert not [r for r in resources if r["kind"] == "Secret"]


# --- schemas -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", ["base", *ENVIRONMENTS, "secrets"])
def test_core_kinds_validate_against_kubernetes(name: str, version: str) -> None:
    resources = SECRETS if name == "secrets" else RENDERS[name]
    core = [r for r in resources if (r["apiVersion"], r["kind"]) not in SCHEMAS]
    assert core
    for resource in core:
        kubernetes_validate.validate(resource, version, strict=True)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", ["base", *ENVIRONMENTS])
def test_the_ray_pods_validate_against_kubernetes_as_pod_templates(name: str, version: str) -> None:
    """KubeRay's CRD embeds the PodTemplateSpec of the Kubernetes it was built with; these are the releases'."""
    templates = list(pod_templates(RENDERS[name]))
    assert len(templates) == 2
    for index, template in enumerate(templates):
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t{index}"}, "template": template}
        kubernetes_validate.validate(wrapped, version, strict=True)


def test_kubernetes_validate_refuses_what_the_api_server_would() -> None:
    service = one(RENDERS["dev"], "Service", "ray-gitops-agent")
    broken = yaml.safe_load(yaml.safe_dump(service))
    broken["spec"]["ports"][0]["targetport"] = "admin"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)
    template = yaml.safe_load(yaml.safe_dump(next(pod_templates(RENDERS["dev"]))))
    template["spec"]["containers"][1]["ports"][0]["containerPort"] = "8001"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                      "template": template}, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("name", ["base", *ENVIRONMENTS])
def test_custom_resources_validate_against_their_vendored_crd_schemas(name: str) -> None:
    custom = [r for r in RENDERS[name] if (r["apiVersion"], r["kind"]) in SCHEMAS]
    assert sorted(r["kind"] for r in custom) == ["RayCluster", "ServiceMonitor", "ServiceMonitor"]
    for resource in custom:
        assert crd_errors(resource) == []


def test_the_crd_schemas_refuse_unknown_fields_and_wrong_types() -> None:
    cluster = yaml.safe_load(yaml.safe_dump(one(RENDERS["dev"], "RayCluster")))
    cluster["spec"]["workerGroupSpecs"][0]["replica"] = 2  # a typo the API server would drop
    cluster["spec"]["authOptions"]["mode"] = "password"
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][1]["volumeMounts"][0]["readonly"] = True  # the pod template is checked too
    errors = crd_errors(cluster)
    assert any("spec.workerGroupSpecs.0" in e and "'replica'" in e for e in errors), errors
    assert any(e.startswith("spec.authOptions.mode") for e in errors), errors
    assert any("containers.1.volumeMounts.0" in e and "'readonly'" in e for e in errors), errors
    monitor = yaml.safe_load(yaml.safe_dump(one(RENDERS["dev"], "ServiceMonitor", "ray-gitops-agent")))
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    assert [e for e in crd_errors(monitor) if e.startswith("spec.endpoints.0.interval")]


def test_the_vendored_schemas_name_their_source_and_version() -> None:
    for path, needle in [(SCHEMAS[("ray.io/v1", "RayCluster")], "KubeRay v1.7.0"),
                         (SCHEMAS[("monitoring.coreos.com/v1", "ServiceMonitor")], "Prometheus Operator v0.93.0")]:
        header = path.read_text()[:600]
        assert needle in header and "tag v" in header


# --- the agent's command line ------------------------------------------------------------------


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_agent_runs_a_gitops_run_the_parser_accepts(environment: str) -> None:
    argv = agent_argv(RENDERS[environment])
    args = parsed_run(argv)
    assert args.verb == "run"
    assert args.branch == f"env/{environment}"
    assert flag(argv, "--environment") == environment
    assert args.state_dir == "/state/agent"
    assert args.admin_host == "0.0.0.0" and args.proxy_host == "0.0.0.0"
    # Prometheus scrapes and the kubelet probes by pod IP; `gitops` and kubectl port-forward by name.
    assert POD_FIELDS["status.podIP"] in args.admin_allowed_hosts.split(",")
    assert f"ray-gitops-agent.ray-gitops-{environment}.svc" in args.admin_allowed_hosts.split(",")


def test_gitops_run_knows_every_flag_the_agent_passes() -> None:
    argv = agent_argv(RENDERS["staging"])
    args = build_parser().parse_args(argv[1:])
    assert args.environment == "staging"


def test_the_agent_joins_the_gcs_of_its_own_pod() -> None:
    resources = RENDERS["prod"]
    spec = head_pod(resources)
    assert spec["containers"][0]["name"] == "ray-head"  # KubeRay's Ray container comes first
    args = parsed_run(agent_argv(resources))
    assert args.ray_address == f"{POD_FIELDS['status.podIP']}:{container_port(spec['containers'][0], 'gcs')}"


def test_the_agent_shares_the_head_s_processes_sockets_and_its_exports() -> None:
    resources = RENDERS["dev"]
    spec = head_pod(resources)
    assert spec["shareProcessNamespace"] is True  # ray.init finds the local raylet among the processes
    mounts = {c["name"]: {m["mountPath"]: m for m in c.get("volumeMounts", [])} for c in containers(spec)}
    assert mounts["agent"]["/tmp/ray"]["name"] == mounts["ray-head"]["/tmp/ray"]["name"]
    # The controller, a worker process of the head container, packages the agent's exports by their path.
    state_dir = Path(parsed_run(agent_argv(resources)).state_dir)
    (mount,) = [m for path, m in mounts["agent"].items() if state_dir.is_relative_to(path)]
    assert state_dir != Path(mount["mountPath"])  # the agent makes it 0700, which it cannot do to a volume's root
    assert mounts["ray-head"][mount["mountPath"]]["name"] == mount["name"]
    assert mounts["ray-head"][mount["mountPath"]]["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    one(resources, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])


def test_every_ray_container_has_the_cluster_s_token() -> None:
    resources = RENDERS["dev"]
    cluster = one(resources, "RayCluster")
    assert cluster["spec"]["authOptions"] == {"mode": "token", "secretName": "ray-gitops-ray-token"}
    # KubeRay sets them in its Ray containers only; the agent has them itself.
    env = {var["name"]: var for var in agent_container(resources)["env"]}
    assert env["RAY_AUTH_MODE"]["value"] == "token"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": cluster["spec"]["authOptions"]["secretName"], "key": "auth_token"}


# --- ports -------------------------------------------------------------------------------------


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_services_and_monitors_reach_the_ports_the_agent_opens(environment: str) -> None:
    resources = RENDERS[environment]
    args = parsed_run(agent_argv(resources))
    wanted = {"ray-gitops-agent": {"admin": args.admin_port},
              "ray-gitops-proxy": {"http": args.proxy_port, "proxy-metrics": args.proxy_metrics_port}}
    for service in (r for r in resources if r["kind"] == "Service"):
        name = service["metadata"]["name"]
        templates = [t for t in pod_templates(resources) if selects(service["spec"]["selector"], t["metadata"]["labels"])]
        assert templates, f"Service {name} selects no pod"
        for port in service["spec"]["ports"]:
            assert port["port"] == wanted[name][port["name"]]
            for template in templates:  # every pod it selects opens the port under that name, on that number
                opened = [p for c in template["spec"]["containers"] for p in c.get("ports", [])
                          if p["name"] == port["targetPort"]]
                assert [p["containerPort"] for p in opened] == [wanted[name][port["name"]]]
    monitored: dict[str, str] = {}
    for monitor in (r for r in resources if r["kind"] == "ServiceMonitor"):
        (service,) = [s for s in resources if s["kind"] == "Service"
                      and selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
            monitored[endpoint["port"]] = endpoint["path"]
    assert monitored == {"admin": "/metrics", "proxy-metrics": "/metrics"}


def test_the_scraped_ports_are_monitoring_prometheus_yml_s() -> None:
    config = yaml.safe_load((ROOT / "monitoring" / "prometheus.yml").read_text())
    ports = {job["job_name"]: int(job["static_configs"][0]["targets"][0].rsplit(":", 1)[1])
             for job in config["scrape_configs"]}
    args = parsed_run(agent_argv(RENDERS["dev"]))
    assert ports == {"gitops-agent": args.admin_port, "gitops-proxy": args.proxy_metrics_port}


# --- image -------------------------------------------------------------------------------------


def test_every_container_runs_the_image_the_dockerfile_documents() -> None:
    (documented,) = re.findall(r"^#\s+docker build -t (\S+) \.$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for name, resources in RENDERS.items():
        images = {c["image"] for spec in pod_specs(resources) for c in containers(spec)}
        assert images == {f"{documented}:{project['version']}"}, name
    (ray,) = [d for d in project["dependencies"] if re.match(r"ray\b", d)]
    assert one(RENDERS["dev"], "RayCluster")["spec"]["rayVersion"] in SpecifierSet(ray[3:])


# --- secrets -----------------------------------------------------------------------------------


def secret_references(resources: list[Resource]) -> set[tuple[str, str]]:
    """(Secret name, key) of every file and variable the pods read."""
    found: set[tuple[str, str]] = set()
    for resource in resources:
        if resource["kind"] == "RayCluster":
            found.add((resource["spec"]["authOptions"]["secretName"], "auth_token"))
    for spec in pod_specs(resources):
        volumes = {v["name"]: v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        for container in containers(spec):
            for var in container.get("env", []):
                if "secretKeyRef" in var.get("valueFrom", {}):
                    found.add((var["valueFrom"]["secretKeyRef"]["name"], var["valueFrom"]["secretKeyRef"]["key"]))
            for mount in container.get("volumeMounts", []):
                if mount["name"] in volumes:
                    for word in shlex.split(" ".join(container.get("args", []))):
                        if word.startswith(mount["mountPath"] + "/"):
                            found.add((volumes[mount["name"]], word[len(mount["mountPath"]) + 1:]))
    return found


def test_the_secrets_read_are_the_example_s_names_and_keys() -> None:
    examples = {(s["metadata"]["name"], key) for s in SECRETS for key in s["stringData"]}
    for name, resources in RENDERS.items():
        assert secret_references(resources) == examples, name


def test_the_example_secrets_hold_placeholders_only() -> None:
    for secret in SECRETS:
        for value in secret["stringData"].values():
            assert "REPLACE" in value


def test_the_agent_reads_its_secrets_from_0400_copies_in_memory() -> None:
    resources = RENDERS["prod"]
    spec = head_pod(resources)
    secret_volumes = {v["name"] for v in spec["volumes"] if "secret" in v}
    assert {spec_volume["secret"]["defaultMode"] for spec_volume in spec["volumes"] if "secret" in spec_volume} == {0o400}
    copier = head_container(resources, "secret-files")
    for container in containers(spec):
        mounted = {m["name"] for m in container.get("volumeMounts", [])}
        assert not (mounted & secret_volumes) or container is copier, f"{container['name']} mounts a Secret itself"
    (files,) = [v for v in spec["volumes"] if v["name"] == "secret-files"]
    assert files["emptyDir"]["medium"] == "Memory"
    agent = agent_container(resources)
    (mount,) = [m for m in agent["volumeMounts"] if m["name"] == "secret-files"]
    assert mount["readOnly"] is True
    installed = re.findall(r"install -m (\d+) (\S+) (\S+)", " ".join(copier["args"]))
    args = parsed_run(agent_argv(resources))
    assert {target for _, _, target in installed} == {args.admin_token_file, args.git_token_file, *args.age_identity}
    assert {mode for mode, _, _ in installed} == {"0400"}
    # The copies belong to the user the agent runs as: the image's (the Dockerfile's USER).
    (user,) = re.findall(r"^USER (\d+):\d+$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)

    def uid(container: dict[str, Any]) -> int:
        return int(container.get("securityContext", {}).get("runAsUser", spec["securityContext"]["runAsUser"]))

    assert uid(copier) == uid(agent) == int(user)


def age_identity_file(path: Path, mode: int) -> Path:
    path.write_text(f"# created: test\n{pyrage.x25519.Identity.generate()}\n")
    path.chmod(mode)
    return path


def test_the_copy_passes_the_agent_s_identity_check_and_the_mounted_secret_would_not(tmp_path: Path) -> None:
    """Kubernetes mounts a Secret 0440 with fsGroup; `gitops run --age-identity` refuses that,
    and takes the copy the init container's own command makes."""
    copier = head_container(RENDERS["dev"], "secret-files")
    mounted = age_identity_file(tmp_path / "mounted", 0o440)
    with pytest.raises(UserError, match="others can read it"):
        load_identities([str(mounted)])
    (line,) = [part.strip() for part in copier["args"][0].split("&&") if "age-identity" in part]
    _, _, mode, _source, _target = shlex.split(line)
    copy = tmp_path / "copy"
    command = [*copier["command"], f"install -m {mode} {shlex.quote(str(mounted))} {shlex.quote(str(copy))}"]
    subprocess.run(command, check=True, timeout=30)
    assert stat.S_IMODE(copy.stat().st_mode) == 0o400
    assert len(load_identities([str(copy)])) == 1
