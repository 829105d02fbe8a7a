"""oci:// model sources, offline: the reference's shape, a tag refused with the
command that pins it (and located in the file), the manifest an image index
names, what a modelcar or an artifact manifest holds, every hostile tar member
a layer can carry refused by name, and the registries' token flow as values."""

from __future__ import annotations

import json

import pytest

from gitops.specs.documents import combine, parse_file
from gitops.specs.pins.pinned_models import bind_models
from vocabulary.replicas.model_digests import is_directory, source_problem
from vocabulary.replicas.oci_sources import (
    Member,
    OciReference,
    blob_url,
    child_manifest,
    layer_compression,
    layer_member,
    manifest_url,
    moving_tag,
    oci_source_problem,
    parse_challenge,
    parse_image,
    parse_oci_reference,
    split_credentials,
    title_path,
    token_from,
    token_request,
)
from vocabulary.spec.backends import BackendConfig, ModelConfig

A = "9f86d081" + "0" * 56
D = "sha256:" + "ab" * 32
E = "sha256:" + "cd" * 32
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def _errors(data: str) -> list[str]:
    documents = combine({"deployments/m.toml": parse_file("deployments/m.toml", data.encode())})
    return sorted(str(error) for error in documents.errors)


def test_an_oci_source_names_registry_repo_at_a_sha256_digest_and_is_a_directory() -> None:
    source = f"oci://registry.example.com:5000/team/llama/weights@{D}"
    assert parse_oci_reference(source) == OciReference("registry.example.com:5000", "team/llama/weights", D)
    assert parse_oci_reference(source).url() == source
    assert source_problem(source) is None
    assert is_directory(source)
    assert parse_oci_reference("oci://127.0.0.1:5000/m:v1.2").tag == "v1.2"
    assert "oci://REGISTRY/REPO" in str(source_problem(f"oci://just-a-name@{D}"))
    assert "lower-case letters" in str(source_problem(f"oci://r.io/Team/Model@{D}"))
    assert "lower-case letters" in str(source_problem(f"oci://r.io/team/../model@{D}"))
    assert source_problem(f"oci://r.io/m@{D.upper().replace('SHA256', 'sha256')}") == "the digest must be lower-case hex"
    assert "sha256: and 64 lower-case hex" in str(source_problem("oci://r.io/m@sha256:abc"))
    assert "sha256: and 64 lower-case hex" in str(source_problem(f"oci://r.io/m@sha512:{'a' * 128}"))
    assert "keep only the digest" in str(source_problem(f"oci://r.io/m:v1@{D}"))
    assert "no usable tag" in str(source_problem("oci://r.io/m:-bad"))


def test_a_tag_is_refused_naming_the_command_that_pins_it_and_it_can_be_read_back() -> None:
    why = oci_source_problem("oci://127.0.0.1:5000/acme/model:latest")
    assert why == (
        "the tag 'latest' of oci://127.0.0.1:5000/acme/model is not a digest (a tag moves): pin one as @sha256:… "
        "(`gitops models resolve oci://127.0.0.1:5000/acme/model:latest` prints it and the sha256)"
    )
    assert moving_tag(f"deployments/m.toml:2:10: models.m.source: {why}") == OciReference(
        "127.0.0.1:5000", "acme/model", tag="latest"
    )
    assert moving_tag("models.m.source: must be 64 hex digits") is None
    bare = oci_source_problem("oci://r.io/acme/model")
    assert bare == (
        "oci://r.io/acme/model names no digest: pin one as oci://r.io/acme/model@sha256:… "
        "(`gitops models resolve oci://r.io/acme/model:TAG` prints it)"
    )


def test_validation_locates_a_tag_at_its_value_and_credentials_are_an_oci_sources_too() -> None:
    errors = _errors(f'''[secrets.registry]
file = "secrets/registry.age"

[models.m]
source = "oci://r.io/acme/model:v2"
sha256 = "{A}"
token_secret = "registry"

[models.n]
source = "oci://r.io/acme/model@{D}"
sha256 = "{A}"
include = ["*.json"]
''')
    assert errors == [
        "deployments/m.toml:12:1: models.n.include: only an hf:// source takes include",
        "deployments/m.toml:5:10: models.m.source: the tag 'v2' of oci://r.io/acme/model is not a digest (a tag "
        "moves): pin one as @sha256:… (`gitops models resolve oci://r.io/acme/model:v2` prints it and the sha256)",
    ]
    errors = _errors(f'''[models.s3]
source = "s3://bucket/m/"
sha256 = "{A}"
token_secret = "x"
''')
    assert "deployments/m.toml:4:1: models.s3.token_secret: only an hf:// or an oci:// source takes token_secret" in errors


def test_a_models_registry_credentials_are_delivered_as_a_secret_of_the_backends_that_list_it() -> None:
    model = ModelConfig(name="m", source=f"oci://r.io/acme/model@{D}", sha256=A, token_secret="registry")
    backend = BackendConfig(name="b", import_path="apps.b:B", version="v1", models=("m",))
    assert bind_models(backend, {"m": model}).secrets == ("registry",)


def test_urls_are_https_but_plain_http_on_a_loopback_registry() -> None:
    loopback = OciReference("127.0.0.1:5000", "acme/model", D)
    assert manifest_url(loopback, D) == f"http://127.0.0.1:5000/v2/acme/model/manifests/{D}"
    assert blob_url(OciReference("r.io", "acme/model"), E) == f"https://r.io/v2/acme/model/blobs/{E}"
    assert manifest_url(OciReference("localhost:5000", "m"), "v1") == "http://localhost:5000/v2/m/manifests/v1"
    assert manifest_url(OciReference("127.evil.com", "m"), "v1").startswith("https://")


def _index(*platforms: tuple[str, str], digests: tuple[str, ...] = ()) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": digests[i] if digests else f"sha256:{str(i) * 64}", "size": 1,
         "platform": {"os": os_name, "architecture": arch}}
        for i, (os_name, arch) in enumerate(platforms)
    ]}).encode()


def test_an_index_names_its_linux_amd64_manifest_or_its_only_one_and_else_is_refused() -> None:
    assert child_manifest(_index(("linux", "arm64"), ("linux", "amd64")), "") == f"sha256:{'1' * 64}"
    assert child_manifest(_index(("linux", "arm64"), ("unknown", "unknown")), "") == f"sha256:{'0' * 64}"
    with pytest.raises(ValueError, match=r"no linux/amd64 manifest \(platforms: linux/arm64, linux/s390x\)"):
        child_manifest(_index(("linux", "arm64"), ("linux", "s390x")), "")
    with pytest.raises(ValueError, match="several linux/amd64"):
        child_manifest(_index(("linux", "amd64"), ("linux", "amd64")), "")
    with pytest.raises(ValueError, match="no sha256 digest"):
        child_manifest(_index(("linux", "amd64"), digests=("sha512:00",)), "")
    manifest = json.dumps({"schemaVersion": 2, "config": {}, "layers": []}).encode()
    assert child_manifest(manifest, OCI_MANIFEST + "; charset=utf-8") is None  # the Content-Type when no mediaType
    with pytest.raises(ValueError, match="not an OCI or Docker v2 image"):
        child_manifest(manifest, "application/vnd.docker.distribution.manifest.v1+prettyjws")
    with pytest.raises(ValueError, match="not JSON"):
        child_manifest(b"<html>", OCI_MANIFEST)


def _manifest(config: str, layers: list[dict[str, object]]) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                       "config": {"mediaType": config, "digest": D, "size": 2}, "layers": layers}).encode()


def test_a_modelcar_is_its_tar_layers_and_an_artifact_its_titled_files() -> None:
    modelcar = parse_image(_manifest(IMAGE_CONFIG, [{"mediaType": TAR_GZIP, "digest": E, "size": 10}]), "")
    assert modelcar.modelcar and [layer.digest for layer in modelcar.layers] == [E]
    assert layer_compression(TAR_GZIP) == "gz"
    assert layer_compression("application/vnd.oci.image.layer.v1.tar") == ""
    artifact = parse_image(_manifest("application/vnd.acme.model+json", [
        {"mediaType": "application/octet-stream", "digest": E, "size": 3,
         "annotations": {"org.opencontainers.image.title": "weights/model.safetensors"}},
    ]), "")
    assert not artifact.modelcar and artifact.layers[0].title == "weights/model.safetensors"
    for layers, why in (
        ([{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": E, "size": 1}], "zstd"),
        ([{"mediaType": TAR_GZIP, "digest": "sha256:abc", "size": 1}], "no sha256 digest"),
        ([{"mediaType": TAR_GZIP, "digest": E, "size": -1}], "no size"),
        ([], "no layers"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_image(_manifest(IMAGE_CONFIG, layers), "")
    for notes, why in (({}, "no org.opencontainers.image.title"),
                             ({"org.opencontainers.image.title": "../../etc/passwd"}, "climbs out")):
        with pytest.raises(ValueError, match=why):
            parse_image(_manifest("application/x", [{"mediaType": "a/b", "digest": E, "size": 1,
                                                     "annotations": notes}]), "")
    same = {"mediaType": "a/b", "digest": E, "size": 1, "annotations": {"org.opencontainers.image.title": "x"}}
    with pytest.raises(ValueError, match="same title"):
        parse_image(_manifest("application/x", [same, same]), "")


def test_layer_members_outside_models_are_skipped_and_inside_are_files_dirs_links_and_whiteouts() -> None:
    assert layer_member("bin/sh", "file") == Member("skip")
    assert layer_member("./etc/passwd", "symlink", "/dev/null") == Member("skip")  # not ours to write
    assert layer_member("models", "dir") == Member("dir", "")
    assert layer_member("./models/", "dir") == Member("dir", "")
    assert layer_member("models/config.json", "file") == Member("file", "config.json")
    assert layer_member("models//sub/./w.bin", "file") == Member("file", "sub/w.bin")
    assert layer_member("models/b.bin", "hardlink", "models/sub/w.bin") == Member("link", "b.bin", "sub/w.bin")
    assert layer_member("models/sub/.wh.old.bin", "file") == Member("whiteout", "sub/old.bin")
    assert layer_member("models/sub/.wh..wh..opq", "file") == Member("opaque", "sub")
    assert layer_member("models/.wh..wh..opq", "file") == Member("opaque", "")


@pytest.mark.parametrize(("name", "kind", "link", "why"), [
    ("/models/x", "file", "", "absolute path"),
    ("/etc/passwd", "file", "", "absolute path"),
    ("models/../../etc/cron.d/x", "file", "", "climbs out"),
    ("../models/x", "file", "", "climbs out"),
    ("models/link", "symlink", "/etc/shadow", "symbolic link"),
    ("models/link", "symlink", "config.json", "symbolic link"),  # even inside: a model holds no links
    ("models", "symlink", "/", "not a directory"),  # /models itself a link out
    ("models/h", "hardlink", "etc/shadow", "outside /models"),
    ("models/h", "hardlink", "models/../etc/shadow", "climbs out"),
    ("models/h", "hardlink", "models", "outside /models"),
    ("models/dev", "device, fifo or other special file", "", "not a file or a directory"),
    ("models/" + "a" * 256, "file", "", "longer than 255 bytes"),
    ("models/" + "a/" * 3000, "file", "", "no file system takes"),
    ("models/x\0y", "file", "", "no file system takes"),
    ("models/.wh.", "file", "", "names no file"),
    ("models/.wh...", "file", "", "names no file"),
])
def test_every_hostile_member_is_refused_by_name_before_anything_is_written(
    name: str, kind: str, link: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        layer_member(name, kind, link)


def test_an_artifact_title_is_a_plain_relative_path() -> None:
    assert title_path("./weights/model.safetensors") == "weights/model.safetensors"
    for title in ("/etc/passwd", "a/../../b", "", "."):
        with pytest.raises(ValueError):
            title_path(title)


def test_the_bearer_challenge_asks_its_realm_for_a_pull_token_and_credentials_stay_off_plain_http() -> None:
    challenge = parse_challenge('Bearer realm="https://auth.r.io/token",service="r.io",scope="repository:a/b:pull"')
    assert challenge is not None and challenge.scheme == "bearer"
    assert token_request(challenge, "a/b") == "https://auth.r.io/token?service=r.io&scope=repository%3Aa%2Fb%3Apull"
    bare = parse_challenge('Bearer realm="http://127.0.0.1:9/token?x=1"')
    assert bare is not None
    assert token_request(bare, "a/b") == "http://127.0.0.1:9/token?x=1&scope=repository%3Aa%2Fb%3Apull"
    basic = parse_challenge('Basic realm="Registry Realm"')
    assert basic is not None and basic.scheme == "basic"
    assert parse_challenge("Negotiate abc") is None
    plain = parse_challenge('Bearer realm="http://auth.example.com/token"')
    assert plain is not None
    with pytest.raises(ValueError, match="plain http on another host"):
        token_request(plain, "a/b")
    assert token_from({"token": "t1"}) == "t1"
    assert token_from({"access_token": "t2"}) == "t2"
    with pytest.raises(ValueError, match="no token"):
        token_from({"token": ""})
    assert split_credentials("robot$ci:s3cr:et\n") == ("robot$ci", "s3cr:et")
    with pytest.raises(ValueError, match="USER:PASSWORD"):
        split_credentials("just-a-token")
