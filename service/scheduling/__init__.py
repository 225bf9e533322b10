"""Scheduling: the bounded queue, admission by deadline and the forming of batches on the engine.
Imports nothing from grpc or the generated protobuf modules."""
