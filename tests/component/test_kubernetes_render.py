"""The kustomize subset of tests/support/kustomize_subset.py renders as kustomize does,
and refuses what it does not implement, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kustomize_subset import (
    KustomizeError,
    json_merge,
    render,
    strategic_merge,
)

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: agent
spec:
  template:
    spec:
      containers:
        - name: agent
          image: ray-gitops:0.1.0
          args: ["run", "--a"]
          env:
            - {name: A, value: "1"}
            - {name: B, value: "2"}
          volumeMounts:
            - {name: x, mountPath: /x}
        - name: other
          image: registry.example:5000/ray-gitops:0.1.0
"""


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_an_overlay_patches_merges_lists_by_key_and_replaces_the_others(tmp_path: Path) -> None:
    write(tmp_path / "base", {"kustomization.yaml": "resources: [deployment.yaml]\n",
                              "deployment.yaml": DEPLOYMENT})
    overlay = write(tmp_path / "overlay", {
        "kustomization.yaml": "namespace: ns\nresources: [../base]\npatches:\n  - path: patch.yaml\n"
                              "labels:\n  - pairs: {env: dev}\n"
                              "images:\n  - {name: ray-gitops, newName: registry.example/team/ray-gitops, newTag: '2'}\n",
        "patch.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: agent}\nspec:\n  template:\n"
                      "    spec:\n      containers:\n        - name: agent\n          args: [run, --b]\n"
                      "          env:\n            - {name: B, value: '3'}\n            - {name: C, value: '4'}\n"
                      "          volumeMounts:\n            - {name: y, mountPath: /x}\n",
    })
    (deployment,) = render(overlay)
    agent, other = deployment["spec"]["template"]["spec"]["containers"]
    assert agent["args"] == ["run", "--b"]
    assert agent["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert agent["volumeMounts"] == [{"name": "y", "mountPath": "/x"}]
    assert agent["image"] == "registry.example/team/ray-gitops:2"
    assert other["image"] == "registry.example:5000/ray-gitops:0.1.0"  # another image's name
    assert deployment["metadata"]["namespace"] == "ns" and deployment["metadata"]["labels"] == {"env": "dev"}
    assert "labels" not in deployment["spec"]["template"].get("metadata", {})  # no includeTemplates


def test_custom_resources_are_json_merge_patched() -> None:
    original = {"spec": {"groups": [{"name": "a", "replicas": 1}], "keep": True, "drop": 1}}
    patched = json_merge(original, {"spec": {"groups": [{"name": "a", "replicas": 2}], "drop": None}})
    assert patched == {"spec": {"groups": [{"name": "a", "replicas": 2}], "keep": True}}
    assert strategic_merge({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


@pytest.mark.parametrize("kustomization, refused", [
    ("resources: [d.yaml]\nnamePrefix: x-\n", "namePrefix"),
    ("resources: [d.yaml]\nlabels:\n  - pairs: {a: b}\n    includeSelectors: true\n", "labels take only"),
    ("resources: [d.yaml]\npatches:\n  - path: d.yaml\n    target: {kind: Deployment}\n", "a patch must be"),
    ("resources: [d.yaml]\npatches:\n  - path: p.yaml\n", "matches 0 resources"),
])
def test_what_is_not_implemented_is_refused_with_its_file(tmp_path: Path, kustomization: str, refused: str) -> None:
    directory = write(tmp_path, {"kustomization.yaml": kustomization, "d.yaml": DEPLOYMENT,
                                 "p.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: nope}\n"})
    with pytest.raises(KustomizeError, match=refused) as error:
        render(directory)
    assert str(directory / "kustomization.yaml") in str(error.value)


def test_patch_directives_are_refused() -> None:
    with pytest.raises(KustomizeError, match=r"\$patch"):
        strategic_merge({"spec": {"a": 1}}, {"spec": {"$patch": "delete"}})
