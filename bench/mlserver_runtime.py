"""The peer server of `make bench`: MLServer (Seldon's Python server of the Open Inference Protocol)
running our own Engine, so that what differs from attnserve is the serving stack, not the model.

Loaded by MLServer itself, in its own virtual environment (build/mlserver-venv, `make
mlserver-venv`: MLServer 1.7.1 needs protobuf < 7, attnserve pins 7), with the repository
on PYTHONPATH; bench/servers.py writes its settings and starts it. MLServer's adaptive batching
(max_batch_size, max_batch_time) merges concurrent calls into one predict(), whose words are
greedy-decoded together in one ONNX Loop call, as attnserve's request mode does.

Imports no bench module (only MLServer and the engine), so nothing of bench/ below it matters here.
"""
from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse

from service.config import EngineConfig
from service.engine.bundle import load_bundle
from service.engine.engine import Engine


class EngineRuntime(MLModel):
    """TEXT (BYTES, one word a row) in, OUTPUT (BYTES, the phonemes joined by spaces) out."""

    async def load(self) -> bool:
        self.engine = Engine(load_bundle(self.settings.parameters.uri), EngineConfig())  # --precision auto
        self.engine.warm_up([self.engine.tokenize(w) for w in ("warmup", "a", "attention")])
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        words = [w.decode() if isinstance(w, bytes) else w for w in StringCodec.decode_input(payload.inputs[0])]
        decoded = self.engine.decode([self.engine.tokenize(w) for w in words])
        return InferenceResponse(model_name=self.name, model_version=self.version,
                                 outputs=[StringCodec.encode_output("OUTPUT", [" ".join(d.output_tokens)
                                                                                for d in decoded])])
