"""attnserve serving: gRPC transport -> batcher -> onnxruntime engine. Never imports torch."""
