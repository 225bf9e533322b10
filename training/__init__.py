"""Training, evaluation and ONNX export for attnserve models.

Only `model.py`, `train.py` and `export.py` need torch; `data.py` and
`metrics.py` are pure Python so evaluation can run against a server without it.
"""
