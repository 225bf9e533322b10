"""WER and PER of a served model (through gRPC) or of a bundle (in-process onnxruntime).

    attnserve-eval --server localhost:50051 --split test     # what `make evaluate` runs
    attnserve-eval --bundle models/g2p-en/1 --split test

The corpus, filter and split are read from the model's manifest, so the words
scored are exactly the held-out words the model was trained without.
"""
from __future__ import annotations

import argparse
import json
import time

from training.data import load_cmudict, load_tsv, references
from training.metrics import score


def load_refs(data: dict, split: str) -> dict:
    splits = (load_cmudict(keep_stress=data["keep_stress"]) if data["corpus"] == "cmudict"
              else load_tsv(data["path"], data["src_tokens"], data["tgt_tokens"]))
    return references(splits[split])


def source_text(src: tuple[str, ...], src_tokens: str) -> str:
    return "".join(src) if src_tokens == "chars" else " ".join(src)


def hyps_from_server(addr: str, sources: list, src_tokens: str, batch: int, timeout_s: float):
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    hyps = {}
    with grpc.insecure_channel(addr) as channel:
        stub = pbg.TransducerStub(channel)
        for i in range(0, len(sources), batch):
            chunk = sources[i:i + batch]
            reply = stub.Transduce(pb.TransduceRequest(
                inputs=[source_text(s, src_tokens) for s in chunk],
                options=pb.DecodeOptions(return_attention=False)), timeout=timeout_s)
            hyps.update({s: list(r.output_tokens) for s, r in zip(chunk, reply.results)})
    return hyps


def hyps_from_bundle(path: str, sources: list, batch: int):
    from service.bundle import load_bundle
    from service.engine import Engine, EngineConfig

    engine = Engine(load_bundle(path), EngineConfig(intra_op_threads=0))
    hyps = {}
    for i in range(0, len(sources), batch):
        chunk = sources[i:i + batch]
        hyps.update({s: d.output_tokens for s, d in zip(chunk, engine.decode([list(s) for s in chunk]))})
    return hyps


def manifest_of(args) -> dict:
    if args.bundle:
        from service.bundle import load_bundle

        return load_bundle(args.bundle).manifest
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    with grpc.insecure_channel(args.server) as channel:
        info = pbg.TransducerStub(channel).GetModelInfo(pb.GetModelInfoRequest(), timeout=args.timeout_s)
    return json.loads(info.manifest_json)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="host:port of a running attnserve server")
    where.add_argument("--bundle", help="a bundle directory, decoded in-process")
    p.add_argument("--split", choices=["train", "dev", "test"], default="test")
    p.add_argument("--batch", type=int, default=64, help="inputs per request")
    p.add_argument("--timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    manifest = manifest_of(args)
    data = manifest["data"]
    refs = load_refs(data, args.split)
    sources = sorted(refs)
    started = time.perf_counter()
    if args.server:
        hyps = hyps_from_server(args.server, sources, data["src_tokens"], args.batch, args.timeout_s)
    else:
        hyps = hyps_from_bundle(args.bundle, sources, args.batch)
    seconds = time.perf_counter() - started
    s = score(hyps, refs)
    print(json.dumps({"model": manifest["name"], "version": manifest["version"], "split": args.split,
                      "via": f"server {args.server}" if args.server else f"bundle {args.bundle}",
                      "wer": round(s.wer, 4), "per": round(s.per, 4), "words": s.words,
                      "seconds": round(seconds, 2)}, indent=2))


if __name__ == "__main__":
    main()
