"""The model repository: every served model by name, each with its manager (versions, hot reload,
its own answerer, batcher and engine)."""
