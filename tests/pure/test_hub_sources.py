"""hf:// model sources, offline: the URL's shape, a branch or tag refused with
the command that pins it (and located in the file), which files `include` and
`exclude` select, the Hub's revision metadata read, and a model's Hub token
delivered as a secret of the backends that list it."""

from __future__ import annotations

import pytest

from gitops.specs.documents import combine, parse_file
from gitops.specs.pins.pinned_models import bind_models
from vocabulary.replicas.hub_sources import (
    HubFile,
    HubSource,
    endpoint_in,
    endpoint_problem,
    file_url,
    hub_source_problem,
    moving_revision,
    parse_hub_source,
    parse_revision,
    revision_url,
    selected,
    token_in,
    token_path,
)
from vocabulary.replicas.model_digests import is_directory, source_problem
from vocabulary.spec.backends import BackendConfig, ModelConfig

COMMIT = "0123456789abcdef0123456789abcdef01234567"
A = "9f86d081" + "0" * 56


def _errors(data: str) -> list[str]:
    documents = combine({"deployments/m.toml": parse_file("deployments/m.toml", data.encode())})
    return sorted(str(error) for error in documents.errors)


def test_an_hf_source_names_org_name_at_a_full_commit_and_is_a_directory() -> None:
    assert parse_hub_source(f"hf://meta-llama/Llama-3.2-1B@{COMMIT}") == HubSource("meta-llama/Llama-3.2-1B", COMMIT)
    assert source_problem(f"hf://org/name@{COMMIT}") is None
    assert is_directory(f"hf://org/name@{COMMIT}")
    assert "needs a revision" in str(source_problem("hf://org/name"))
    assert "ORG/NAME" in str(source_problem(f"hf://name@{COMMIT}"))
    assert "ORG/NAME" in str(source_problem(f"hf://a/b/c@{COMMIT}"))
    assert "ORG/NAME" in str(source_problem(f"hf://org/..@{COMMIT}"))
    assert source_problem(f"hf://org/name@{COMMIT.upper()}") == "the commit hash must be lower-case hex"


def test_a_branch_or_tag_is_refused_naming_the_command_that_pins_it_and_it_can_be_read_back() -> None:
    why = hub_source_problem("hf://org/name@main")
    assert why == (
        "the revision 'main' of hf://org/name is not a full commit hash (a branch or a tag moves): pin one "
        "(`gitops models resolve hf://org/name@main` prints it and the sha256)"
    )
    assert moving_revision(f"deployments/m.toml:2:10: models.m.source: {why}") == HubSource("org/name", "main")
    assert moving_revision("models.m.source: must be 64 hex digits") is None
    short = hub_source_problem("hf://org/name@0123abc")  # a short hash is no pin either
    assert short is not None and "not a full commit hash" in short


def test_validation_locates_a_moving_revision_at_its_value() -> None:
    errors = _errors(f'''[models.m]
source = "hf://org/name@v1.0"
sha256 = "{A}"
''')
    assert len(errors) == 1
    assert errors[0].startswith("deployments/m.toml:2:10: models.m.source: the revision 'v1.0' of hf://org/name")


def test_hub_keys_belong_to_hf_sources_and_a_token_secret_must_be_declared() -> None:
    errors = _errors(f'''[models.s3]
source = "s3://bucket/m/"
sha256 = "{A}"
include = ["*.json"]

[models.hub]
source = "hf://org/name@{COMMIT}"
sha256 = "{A}"
include = [""]
token_secret = "hf"
''')
    assert errors == [
        "deployments/m.toml:10:16: models.hub.token_secret: no [secrets.hf] is declared (declared: none is declared)",
        "deployments/m.toml:4:1: models.s3.include: only an hf:// source takes include",
        "deployments/m.toml:9:12: models.hub.include[0]: must be a non-empty glob",
    ]


def test_include_and_exclude_select_files_with_the_hub_clients_globs() -> None:
    files = [HubFile(path, 1, None) for path in (
        "config.json", "model.safetensors", "onnx/model.onnx", "onnx/extra/x.onnx", "pytorch_model.bin", "README.md",
    )]

    def paths(include: list[str], exclude: list[str]) -> list[str]:
        return [file.path for file in selected(files, include, exclude)]

    assert paths([], []) == sorted(file.path for file in files)
    assert paths(["*.json", "*.safetensors"], []) == ["config.json", "model.safetensors"]
    assert paths(["*.onnx"], []) == ["onnx/extra/x.onnx", "onnx/model.onnx"]  # `*` crosses '/'
    assert paths(["onnx/"], ["*/extra/*"]) == ["onnx/model.onnx"]  # a trailing '/' takes the folder
    assert paths([], ["*.bin", "*.md"]) == ["config.json", "model.safetensors", "onnx/extra/x.onnx", "onnx/model.onnx"]
    assert paths(["*.gguf"], []) == []


def test_the_hubs_revision_metadata_is_read_into_a_commit_and_its_files() -> None:
    body = {
        "sha": COMMIT,
        "siblings": [
            {"rfilename": "config.json", "size": 12, "blobId": "b" * 40},
            {"rfilename": "model.safetensors", "size": 99, "lfs": {"sha256": A, "size": 4096, "pointerSize": 134}},
        ],
    }
    assert parse_revision(body).commit == COMMIT
    assert parse_revision(body).files == (HubFile("config.json", 12, None), HubFile("model.safetensors", 4096, A))
    for bad in ({}, {"sha": "main"}, {"sha": COMMIT, "siblings": [{"size": 1}]},
                {"sha": COMMIT, "siblings": [{"rfilename": "x"}]}):
        with pytest.raises(ValueError):
            parse_revision(bad)


def test_the_hubs_urls_and_endpoint() -> None:
    source = HubSource("org/name", "refs/pr/1")
    assert revision_url("http://127.0.0.1:9/", source) == "http://127.0.0.1:9/api/models/org/name/revision/refs%2Fpr%2F1?blobs=true"
    assert file_url("https://hub", "org/name", COMMIT, "a b/c.json") == f"https://hub/org/name/resolve/{COMMIT}/a%20b/c.json"
    assert endpoint_problem("https://huggingface.co") is None
    assert endpoint_problem("http://127.0.0.1:8080") is None
    assert "loopback" in str(endpoint_problem("http://hub.internal"))
    assert "no credentials" in str(endpoint_problem("https://user:pw@hub.internal"))
    assert token_path({}, "/home/u") == "/home/u/.cache/huggingface/token"
    assert token_path({"HF_HOME": "/hf"}, "/home/u") == "/hf/token"
    assert token_path({"HF_HOME": "/hf", "HF_TOKEN_PATH": "/run/t"}, "/home/u") == "/run/t"


def test_the_environment_names_the_hub_and_its_token() -> None:
    assert endpoint_in({}) == "https://huggingface.co"
    assert endpoint_in({"HF_ENDPOINT": "http://127.0.0.1:8080/"}) == "http://127.0.0.1:8080"
    with pytest.raises(ValueError, match="loopback"):
        endpoint_in({"HF_ENDPOINT": "http://hub.internal"})
    assert token_in({"HF_TOKEN": " hf_abc\n"}) == "hf_abc"
    assert token_in({"HF_TOKEN": "  "}) is None and token_in({}) is None


def test_a_models_token_secret_is_delivered_to_the_backends_listing_the_model_once() -> None:
    hub = ModelConfig(name="llm", source=f"hf://org/name@{COMMIT}", sha256=A, token_secret="hf")
    other = ModelConfig(name="tok", source=f"hf://org/tok@{COMMIT}", sha256=A, token_secret="hf")
    backend = BackendConfig(name="b", version="v", import_path="apps.s:S", models=("llm", "tok"), secrets=("db",))
    assert bind_models(backend, {"llm": hub, "tok": other}).secrets == ("db", "hf")
    plain = BackendConfig(name="p", version="v", import_path="apps.s:S", models=())
    assert bind_models(plain, {"llm": hub}).secrets == ()
