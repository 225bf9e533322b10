"""attnserve serving. Never imports torch. A request flows down the tree, one way:

    transport/   gRPC and HTTP handlers, guard, security; the native API's protobuf <-> domain in
                 convert.py, the Open Inference Protocol's in oip.py (kserve.py gRPC, http.py REST)
    repository/  the models by name, each with its manager (versions, hot reload)
    answering/   what a call is answered with before the model: overrides, lexicon, cache,
                 several words in one input; it holds the batcher
    scheduling/  the queue, admission and batch forming (request-level or continuous)
    engine/      onnxruntime: the bundle's graphs, greedy (ONNX Loop), beam and forced decoding,
                 the continuous step's sampling
    client/      attnserve-client and the other client-side tools (not the server)

Beside them, imported by every layer and importing none: domain.py (the values and errors every
layer speaks), config.py (every section's frozen config), metrics.py, tasks.py. server.py builds
the server (build_server, on port 0 in tests). tests/test_layers.py forbids every upward import.
"""
