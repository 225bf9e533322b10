"""Answering: what a call is answered with before the model (overrides, lexicon, response cache,
several words in one input) and what it asks of it, through the batcher it holds.
Imports nothing from grpc or the generated protobuf modules."""
