"""The model repository: every served model by name, each with its manager (versions, hot reload,
its own batcher and engine)."""
