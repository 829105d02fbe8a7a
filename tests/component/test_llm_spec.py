"""A backend's [llm] table as a spec file writes it: the built-in OpenAI app with its table,
in the backend's version, or refused with FILE:LINE and what to write instead."""

from __future__ import annotations

from pathlib import Path

from gitops.specs.loading import Loader
from vocabulary.spec.llm import BUILTIN_APP

DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
SPEC = """\
[models.tiny]
source = "file:///srv/models/tiny.txt"
sha256 = "{digest}"

[backends.chat]
models = ["tiny"]
{extra}
[backends.chat.llm]
engine = "{engine}"
model = "{model}"
{llm}
"""


def load(tmp_path: Path, engine: str = "ngram", model: str = "tiny", llm: str = "", extra: str = ""):
    (tmp_path / "deployments").mkdir(exist_ok=True)
    text = SPEC.format(digest=DIGEST, engine=engine, model=model, llm=llm, extra=extra)
    (tmp_path / "deployments" / "chat.toml").write_text(text)
    return Loader().load_directory(tmp_path / "deployments", root=tmp_path)


def test_an_llm_backend_runs_the_builtin_openai_app_given_its_table(tmp_path: Path) -> None:
    result = load(tmp_path, llm="max_model_len = 512\nengine_args = { order = 4 }")
    assert result.errors == ()
    chat = result.state.backends["chat"]
    assert chat.import_path == BUILTIN_APP
    assert chat.init_kwargs["llm"] == {
        "engine": "ngram", "model": "tiny", "served_model_name": None, "tensor_parallel_size": 1,
        "max_model_len": 512, "lora_adapters": [], "max_loras": 4, "engine_args": {"order": 4},
    }
    assert chat.llm is not None and chat.llm.max_model_len == 512
    assert "tiny" in chat.model_sources


def test_a_change_of_engine_arguments_is_a_new_version(tmp_path: Path) -> None:
    before = load(tmp_path, llm="max_model_len = 512").state.backends["chat"].version
    after = load(tmp_path, llm="max_model_len = 1024").state.backends["chat"].version
    assert before != after


def test_llm_tables_that_cannot_run_are_refused_with_file_line_and_what_to_write(tmp_path: Path) -> None:
    def errors(**kwargs: str) -> list[str]:
        return [str(e) for e in load(tmp_path, **kwargs).errors]

    assert errors(model="other") == [
        "deployments/chat.toml:5:1: backends.chat: llm.model 'other' is not in this backend's models: "
        "add it (models = [\"other\"])"
    ]
    assert errors(extra='import_path = "apps.chat:Chat"') == [
        "deployments/chat.toml:5:1: backends.chat: import_path and [llm] cannot both be set: an [llm] backend "
        "runs the built-in OpenAI app"
    ]
    assert errors(engine="tgi") == [
        "deployments/chat.toml:9:10: backends.chat.llm.engine: must be 'vllm' or 'ngram' (got 'tgi')"
    ]
    assert errors(llm="tensor_parallel_size = 2") == [
        "deployments/chat.toml:5:1: backends.chat: llm.tensor_parallel_size = 2: engine 'ngram' runs on one CPU "
        "process (1)"
    ]
    assert errors(llm="engine_args = { max_model_len = 9 }") == [
        "deployments/chat.toml:5:1: backends.chat: llm.engine_args.max_model_len: write it as llm.max_model_len"
    ]


def test_vllm_s_tensor_parallel_size_is_what_the_placement_bundles_hold(tmp_path: Path) -> None:
    no_gpu = [str(e) for e in load(tmp_path, engine="vllm").errors]
    assert no_gpu == ["deployments/chat.toml:5:1: backends.chat: engine 'vllm' needs a GPU: "
                      "ray_actor_options = { num_gpus = 1 } (or [placement])"]
    one_gpu = load(tmp_path, engine="vllm", extra="ray_actor_options = { num_gpus = 1 }")
    assert one_gpu.errors == ()
    two = "[backends.chat.placement]\nbundles = [{ CPU = 1 }, { GPU = 1 }, { GPU = 1 }]\nstrategy = \"STRICT_PACK\"\n"
    assert load(tmp_path, engine="vllm", extra=two, llm="tensor_parallel_size = 2").errors == ()
    three = [str(e) for e in load(tmp_path, engine="vllm", extra=two, llm="tensor_parallel_size = 3").errors]
    assert three == ["deployments/chat.toml:5:1: backends.chat: llm.tensor_parallel_size = 3 but the [placement] "
                     "bundles hold 2 GPUs: one GPU per engine worker"]
    unplaced = [str(e) for e in load(tmp_path, engine="vllm", llm="tensor_parallel_size = 2").errors]
    assert unplaced[0].endswith("llm.tensor_parallel_size = 2 needs [placement] bundles holding 2 GPUs "
                                "(e.g. bundles = [{ CPU = 1 }, { GPU = 1 }, { GPU = 1 }])")


def test_a_backend_without_import_path_or_llm_is_told_either(tmp_path: Path) -> None:
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments" / "x.toml").write_text("[backends.x]\nnum_replicas = 1\n")
    errors = [str(e) for e in Loader().load_directory(tmp_path / "deployments", root=tmp_path).errors]
    assert errors == ["deployments/x.toml:1:1: backends.x: missing required key 'import_path' (or an [llm] table: "
                      "the built-in OpenAI-compatible backend)"]
