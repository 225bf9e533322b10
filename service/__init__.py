"""attnserve serving. Never imports torch. A request flows down the tree:

    transport/   gRPC handlers, guard, security; proto <-> domain in convert.py
    scheduling/  admission and the batcher
    engine/      onnxruntime: the bundle's graphs, greedy Loop graph, beam search
    repository/  the models by name, each with its manager (versions, reload)
    client/      attnserve-client and the other client-side tools (not the server)

server.py builds the server from config.py's one Config; metrics.py holds every metric.
"""
