"""Phonemes for words, from attnserve's Open Inference Protocol (KServe v2) API, with the stock Triton client.

    pip install tritonclient==2.73.0           # plus grpcio and protobuf (attnserve's dependencies have them)
    python examples/kserve_client.py attention knight
    python examples/kserve_client.py --url localhost:50051 --model g2p-en --alignment phoneme

Nothing here is attnserve-specific beyond the tensor names: any KServe v2 / Triton
gRPC client can do the same with the TEXT input and the OUTPUT, SCORE, ATTENTION,
OUTPUT_LENGTH and INPUT_LENGTH outputs.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException


def transcribe(client: triton.InferenceServerClient, model: str, words: list[str], max_output_len: int = 0,
               alignment: bool = False) -> list[dict]:
    """One dict per word: output text, log-prob and, if asked, its (T, S) attention matrix."""
    text = triton.InferInput("TEXT", [len(words)], "BYTES")
    text.set_data_from_numpy(np.array([w.encode("utf-8") for w in words], dtype=np.object_))
    names = ["OUTPUT", "SCORE"] + (["ATTENTION", "OUTPUT_LENGTH", "INPUT_LENGTH"] if alignment else [])
    params = {"return_attention": alignment}
    if max_output_len:
        params["max_output_len"] = max_output_len
    result = client.infer(model, [text], outputs=[triton.InferRequestedOutput(n) for n in names],
                          parameters=params)
    items = [{"word": w, "output": o.decode("utf-8"), "log_prob": float(s)}
             for w, o, s in zip(words, result.as_numpy("OUTPUT"), result.as_numpy("SCORE"))]
    if alignment:
        # ATTENTION is zero-padded to the longest item; the lengths cut each item's real matrix out.
        attn, rows, cols = (result.as_numpy(n) for n in ("ATTENTION", "OUTPUT_LENGTH", "INPUT_LENGTH"))
        for b, item in enumerate(items):
            item["attention"] = attn[b, :rows[b], :cols[b]]
    return items


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("words", nargs="+")
    p.add_argument("--url", default="localhost:50051", help="host:port of the attnserve gRPC server")
    p.add_argument("--model", default="g2p-en", help="model name (the bundle's manifest name)")
    p.add_argument("--max-output-len", type=int, default=0, help="cap on output tokens (0: the server's)")
    p.add_argument("--alignment", action="store_true",
                   help="also show the input character each output token attends to most")
    args = p.parse_args(argv)
    client = triton.InferenceServerClient(args.url)
    try:
        if not client.is_model_ready(args.model):
            print(f"model {args.model!r} is not ready at {args.url}", file=sys.stderr)
            return 1
        items = transcribe(client, args.model, args.words, args.max_output_len, args.alignment)
    except InferenceServerException as e:
        print(f"error: {e.status()}: {e.message()}", file=sys.stderr)
        return 1
    finally:
        client.close()
    width = max(len(w) for w in args.words)
    for item in items:
        print(f"{item['word']:<{width}}  {item['output']}  (log-prob {item['log_prob']:.3f})")
        if args.alignment:
            # Row t is output step t (the last may be </s>); its argmax is the source position it used most.
            steps = item["output"].split() + ["</s>"]
            print(" " * width + "  " + " ".join(f"{tok}<-{item['word'][j]}" for tok, j in
                                               zip(steps, item["attention"].argmax(axis=1))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
