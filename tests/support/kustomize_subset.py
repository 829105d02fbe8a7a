"""A renderer for the part of kustomize that contrib/kubernetes/ uses, for its tests.

kustomize is not on PyPI or in Debian, so `make test` cannot run it. This
renders a kustomization the way `kustomize build` does for the fields it
knows, and refuses every other field by name, so that the manifests cannot
drift into kustomize features the tests do not check:

- `resources`: files (every YAML document) and directories (their own
  kustomization, rendered first), in order;
- `patches`: `- path: FILE` only, each a patch of the resource with the same
  kind and name: a strategic merge patch for the core kinds (maps merge; the
  lists Kubernetes merges by key, such as containers, env and volumes by
  `name` and volumeMounts by `mountPath`, merge item by item; other lists are
  replaced), a JSON merge patch (RFC 7386) for other kinds, as kustomize
  does for custom resources without an OpenAPI schema;
- `namespace`: set on every namespaced resource;
- `labels`: `pairs` added to every resource's metadata.labels (without
  `includeSelectors` or `includeTemplates`);
- `images`: `name` with `newName` and/or `newTag`, in every container and
  init container.

They run in kustomize's order: patches, namespace, labels, images.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KustomizeError", "json_merge", "load_documents", "render", "strategic_merge"]

Resource = dict[str, Any]

_KNOWN_KEYS = frozenset({"apiVersion", "kind", "resources", "patches", "namespace", "labels", "images"})
_LABEL_KEYS = frozenset({"pairs", "includeSelectors", "includeTemplates"})
_IMAGE_KEYS = frozenset({"name", "newName", "newTag"})
# Kinds whose patches are strategic merge patches (kustomize knows their schema).
_CORE_GROUPS = frozenset({"v1", "apps/v1", "batch/v1", "networking.k8s.io/v1", "policy/v1"})
# The merge keys of the core lists these manifests use (Kubernetes' patchMergeKey).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}
_CLUSTER_SCOPED = frozenset({"Namespace", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
                             "CustomResourceDefinition", "StorageClass"})
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class KustomizeError(ValueError):
    """A kustomization this renderer cannot render as kustomize would; names the file."""


def load_documents(path: Path) -> list[Resource]:
    with path.open() as file:
        return [document for document in yaml.load_all(file, Loader=_LOADER) if document is not None]


def render(directory: Path) -> list[Resource]:
    """The resources `kustomize build DIRECTORY` prints, in order."""
    file = directory / "kustomization.yaml"
    if not file.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    (spec,) = load_documents(file)
    unknown = set(spec) - _KNOWN_KEYS
    if unknown:
        raise KustomizeError(f"{file}: fields this renderer does not implement: {', '.join(sorted(unknown))}")
    resources: list[Resource] = []
    for entry in spec.get("resources", []):
        target = (directory / entry).resolve()
        resources += render(target) if target.is_dir() else load_documents(target)
    for patch_entry in spec.get("patches", []):
        if set(patch_entry) != {"path"}:
            raise KustomizeError(f"{file}: a patch must be `- path: FILE` here, not {sorted(patch_entry)}")
        for patch in load_documents(directory / patch_entry["path"]):
            _apply_patch(resources, patch, file)
    if "namespace" in spec:
        for resource in resources:
            if resource["kind"] not in _CLUSTER_SCOPED:
                resource.setdefault("metadata", {})["namespace"] = spec["namespace"]
    for labels in spec.get("labels", []):
        if set(labels) - _LABEL_KEYS or labels.get("includeSelectors") or labels.get("includeTemplates"):
            raise KustomizeError(f"{file}: labels take only `pairs` here (no selectors, no templates)")
        for resource in resources:
            resource.setdefault("metadata", {}).setdefault("labels", {}).update(labels["pairs"])
    for image in spec.get("images", []):
        if set(image) - _IMAGE_KEYS or "name" not in image:
            raise KustomizeError(f"{file}: an image entry takes name, newName and newTag here, not {sorted(image)}")
        for resource in resources:
            _set_image(resource, image)
    return resources


def _apply_patch(resources: list[Resource], patch: Resource, file: Path) -> None:
    name = patch.get("metadata", {}).get("name")
    matches = [r for r in resources if r["kind"] == patch.get("kind") and r["metadata"]["name"] == name]
    if len(matches) != 1:
        raise KustomizeError(f"{file}: the patch of {patch.get('kind')} {name} matches {len(matches)} resources")
    (target,) = matches
    merged = strategic_merge(target, patch) if target["apiVersion"] in _CORE_GROUPS else json_merge(target, patch)
    target.clear()
    target.update(merged)


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """`patch` over `original` as Kubernetes' strategic merge patch does, for the lists of `_MERGE_KEYS`."""
    if isinstance(patch, dict) and isinstance(original, dict):
        if any(key.startswith("$") for key in patch):
            raise KustomizeError(f"patch directives ({', '.join(k for k in patch if k.startswith('$'))}) are not implemented")
        merged = copy.deepcopy(original)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(original.get(key), value, key) if key in original else copy.deepcopy(value)
        return merged
    if isinstance(patch, list) and isinstance(original, list) and field in _MERGE_KEYS:
        key = _MERGE_KEYS[field]
        merged_list = copy.deepcopy(original)
        for item in patch:
            index = next((i for i, old in enumerate(merged_list) if old.get(key) == item.get(key)), None)
            if index is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[index] = strategic_merge(merged_list[index], item)
        return merged_list
    return copy.deepcopy(patch)


def json_merge(original: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, null deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = json_merge(merged.get(key), value)
    return merged


def _set_image(node: Any, image: dict[str, str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    container["image"] = _new_image(container.get("image", ""), image)
            _set_image(value, image)
    elif isinstance(node, list):
        for item in node:
            _set_image(item, image)


def _new_image(current: str, image: dict[str, str]) -> str:
    slash = current.rfind("/")
    colon = current.rfind(":")
    name, tag = (current[:colon], current[colon + 1:]) if colon > slash else (current, "")
    if name != image["name"]:
        return current
    name = image.get("newName", name)
    tag = image.get("newTag", tag)
    return f"{name}:{tag}" if tag else name
