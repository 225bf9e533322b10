"""Stock tritonclient calls for tests/transport/test_kserve.py, run in a separate worker process.

Why a separate process: tritonclient's generated grpc_service_pb2 and the server's
attnserve.inference.grpc_service_pb2 both define the `inference.*` messages, and protobuf's
process-wide descriptor pool refuses the second definition ("duplicate symbol").
So the test process never imports tritonclient: these functions import it in the worker
and return plain picklable values (numpy arrays, dicts, Failed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Failed:
    """An InferenceServerException, as picklable values."""

    status: str  # e.g. "StatusCode.NOT_FOUND", as tritonclient reports it
    message: str


def _client(url: str):
    import tritonclient.grpc as triton

    return triton.InferenceServerClient(url)


def _failed(e) -> Failed:
    return Failed(str(e.status()), str(e.message()))


def health(url: str, model: str, version: str = "") -> dict:
    from tritonclient.utils import InferenceServerException

    with _client(url) as c:
        out = {"live": c.is_server_live(), "ready": c.is_server_ready()}
        try:
            out["model_ready"] = c.is_model_ready(model, version)
        except InferenceServerException as e:
            out["model_ready"] = _failed(e)
        return out


def metadata(url: str, model: str, version: str = "") -> dict | Failed:
    from tritonclient.utils import InferenceServerException

    with _client(url) as c:
        try:
            return {"server": c.get_server_metadata(as_json=True),
                    "model": c.get_model_metadata(model, version, as_json=True)}
        except InferenceServerException as e:
            return _failed(e)


def model_config(url: str, model: str, version: str = "") -> dict | Failed:
    """Triton's ModelConfig extension, as tritonclient (and so perf_analyzer) parses it."""
    from tritonclient.utils import InferenceServerException

    with _client(url) as c:
        try:
            return c.get_model_config(model, version, as_json=True)["config"]
        except InferenceServerException as e:
            return _failed(e)


def infer(url: str, model: str, data: np.ndarray, datatype: str = "BYTES", outputs: list[str] | None = None,
          parameters: dict | None = None, version: str = "") -> dict | Failed:
    """TEXT = data; returns {output name: array} for every output the server sent, plus "_id"."""
    import tritonclient.grpc as triton
    from tritonclient.utils import InferenceServerException

    text = triton.InferInput("TEXT", list(data.shape), datatype)
    text.set_data_from_numpy(data)
    requested = [triton.InferRequestedOutput(n) for n in outputs] if outputs else None
    with _client(url) as c:
        try:
            result = c.infer(model, [text], model_version=version, outputs=requested, parameters=parameters,
                             request_id="req-1")
        except InferenceServerException as e:
            return _failed(e)
    response = result.get_response()
    return {"_id": response.id, **{o.name: result.as_numpy(o.name) for o in response.outputs}}


def repository(url: str, action: str, model: str = "") -> list[dict] | None | Failed:
    """tritonclient's model repository extension: "index" (as JSON), "load" or "unload" a model."""
    from tritonclient.utils import InferenceServerException

    client = _client(url)
    try:
        if action == "index":
            return client.get_model_repository_index(as_json=True).get("models", [])
        if action == "load":
            client.load_model(model)
        elif action == "unload":
            client.unload_model(model)
        return None
    except InferenceServerException as e:
        return _failed(e)
