"""The engine: a bundle's ONNX graphs on onnxruntime (greedy Loop graph, beam search).
Imports nothing from grpc or the generated protobuf modules."""
