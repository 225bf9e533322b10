"""The engine: a bundle's ONNX graphs on onnxruntime, and how a formed batch is decoded (greedy
ONNX Loop, beam search, teacher forcing, the continuous step's sampling).
Imports nothing from grpc or the generated protobuf modules."""
