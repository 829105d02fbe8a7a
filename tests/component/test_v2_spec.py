"""`protocol = "v2"` and `[backends.X.v2]` as a spec file writes them: into the backend's config
and its version, or refused with FILE:LINE:COL and what to write instead."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gitops.specs.loading import Loader
from vocabulary.spec.v2 import BackendProtocol, TensorConfig, TensorDatatype

DIGEST = hashlib.sha256(b"weights").hexdigest()
MODEL = f"""\
[models.linear]
source = "file:///srv/models/linear.json"
sha256 = "{DIGEST}"
"""
SPEC = """\
[backends.linear]
import_path = "apps.linear:{cls}"
protocol = "v2"
models = ["linear"]

[backends.linear.v2]
name = "iris"
model = "{model}"
inputs = [{{ name = "x", datatype = "FP32", shape = [-1, 4] }}]
outputs = [
  {{ name = "y", datatype = "{datatype}", shape = {shape} }},
  {{ name = "label", datatype = "BYTES", shape = [-1] }},
]

[endpoints.v2]
route = "/v2"
traffic = {{ linear = 1.0 }}
"""
APP = "class Linear:\n    def predict(self, inputs): ...\n\nclass Handler:\n    def __call__(self, request): ...\n"


def load(tmp_path: Path, spec: str | None = None, **fields: str):
    values = {"cls": "Linear", "model": "linear", "datatype": "FP32", "shape": "[-1, 3]", **fields}
    (tmp_path / "deployments").mkdir(exist_ok=True)
    (tmp_path / "deployments" / "linear.toml").write_text(MODEL + (spec if spec is not None else SPEC.format(**values)))
    (tmp_path / "apps").mkdir(exist_ok=True)
    (tmp_path / "apps" / "linear.py").write_text(APP)
    return Loader().load_directory(tmp_path / "deployments", root=tmp_path)


def test_the_v2_table_reaches_the_backend_config(tmp_path: Path) -> None:
    result = load(tmp_path)
    assert result.errors == ()
    linear = result.state.backends["linear"]
    assert linear.protocol is BackendProtocol.V2 and linear.import_path == "apps.linear:Linear"
    assert linear.v2.name == "iris" and linear.v2.model == "linear" and linear.v2.platform == "python"
    assert linear.v2.inputs == (TensorConfig(name="x", datatype=TensorDatatype.FP32, shape=(-1, 4)),)
    assert [tensor.name for tensor in linear.v2.outputs] == ["y", "label"]
    assert linear.model_sources["linear"].sha256 == DIGEST


def test_a_change_of_the_v2_table_is_a_new_version(tmp_path: Path) -> None:
    before = load(tmp_path).state.backends["linear"].version
    assert load(tmp_path, shape="[-1, 5]").state.backends["linear"].version != before


def test_bad_v2_tables_are_refused_with_file_line_and_column(tmp_path: Path) -> None:
    errors = [str(error) for error in load(tmp_path, datatype="FLOAT", shape="[-1, -3]").errors]
    assert errors == [
        "deployments/linear.toml:14:28: backends.linear.v2.outputs[0].datatype: must be 'BOOL', 'UINT8', 'UINT16', "
        "'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64' or 'BYTES' (got 'FLOAT')",
        "deployments/linear.toml:14:37: backends.linear.v2.outputs[0].shape: dimensions are sizes >= 0, "
        "or -1 for one that varies (got -3)",
    ]


def test_the_version_model_must_be_one_of_the_backends_models(tmp_path: Path) -> None:
    errors = [str(error) for error in load(tmp_path, model="resnet").errors]
    assert errors == [
        "deployments/linear.toml:4:1: backends.linear: v2.model 'resnet' is not in this backend's models: "
        "add it (models = [\"resnet\"])"
    ]


def test_a_v2_model_class_needs_predict_not_call(tmp_path: Path) -> None:
    errors = [str(error) for error in load(tmp_path, cls="Handler").errors]
    assert errors == [
        "deployments/linear.toml:5:1: backends.linear.import_path: class 'Handler' in apps/linear.py has no predict "
        "method (a v2 model's predict(inputs) -> outputs)"
    ]


def test_protocol_and_the_v2_table_go_together(tmp_path: Path) -> None:
    without_table = SPEC.format(cls="Linear", model="linear", datatype="FP32", shape="[-1]").split("[backends.linear.v2]")[0]
    endpoint = '[endpoints.v2]\nroute = "/v2"\ntraffic = { linear = 1.0 }\n'
    errors = [str(error) for error in load(tmp_path, spec=without_table + endpoint).errors]
    assert errors == [
        "deployments/linear.toml:4:1: backends.linear: protocol = \"v2\" needs a [v2] table: the model's inputs and "
        "outputs (docs/guides/v2.md)"
    ]
    without_protocol = SPEC.format(cls="Linear", model="linear", datatype="FP32", shape="[-1]").replace('protocol = "v2"\n', "")
    errors = [str(error) for error in load(tmp_path, spec=without_protocol).errors]
    assert errors == [
        "deployments/linear.toml:4:1: backends.linear: a [v2] table is read only with protocol = \"v2\": add it, "
        "or remove the table"
    ]


def test_a_misspelt_protocol_is_located_at_its_value(tmp_path: Path) -> None:
    spec = SPEC.format(cls="Linear", model="linear", datatype="FP32", shape="[-1]").replace('"v2"\n', '"V2"\n', 1)
    errors = [str(error) for error in load(tmp_path, spec=spec).errors]
    assert errors == ["deployments/linear.toml:6:12: backends.linear.protocol: must be 'v2' (got 'V2')"]
