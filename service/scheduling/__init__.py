"""Scheduling: admission by deadline and the batcher that packs concurrent calls onto the engine.
Imports nothing from grpc or the generated protobuf modules."""
