"""WER and PER of a served model (through gRPC) or of a bundle (in-process onnxruntime).

    attnserve-eval --server localhost:50051 --split test     # what `make evaluate` runs
    attnserve-eval --bundle models/g2p-en/1 --split test
    attnserve-eval --bundle models/g2p-fra/1 --gold data/sigmorphon-2021/medium/fre_test.tsv --beam-size 5

The corpus, filter and split are read from the model's manifest, so the words
scored are exactly the held-out words the model was trained without. --gold scores
any `spelling<TAB>segments` file instead, as the SIGMORPHON G2P tasks' scorer does:
line by line, a word right when its predicted segments equal the gold ones, WER the
percentage of lines wrong; the spelling goes through the model's own normalization,
and through a server the lexicon is bypassed and unknown symbols are decoded as unknown.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, fields

from attnserve.config import ArgumentParser, add_fields, setting, values

from attnserve.bundle import Manifest, as_manifest
from training.data import load_described, read_lines, references, strip_stress
from training.metrics import gold_wer, score


def load_splits(data: dict) -> dict:
    """The corpus a manifest's `data` describes, split: {split: [Pair]} (parse it once, use it often)."""
    return load_described(data)


def load_refs(data: dict, split: str) -> dict:
    return references(load_splits(data)[split])


def source_text(src: tuple[str, ...], src_tokens: str) -> str:
    return "".join(src) if src_tokens == "chars" else " ".join(src)


def hyps_from_server(addr: str, sources: list, src_tokens: str, batch: int, timeout_s: float, beam_size: int,
                     alpha: float, model: str = "", allow_unknown: bool = False):
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    hyps = {}
    with grpc.insecure_channel(addr) as channel:
        stub = pbg.TransducerStub(channel)
        for i in range(0, len(sources), batch):
            chunk = sources[i:i + batch]
            reply = stub.Transduce(pb.TransduceRequest(
                inputs=[source_text(s, src_tokens) for s in chunk], model_name=model,
                # the model's own quality: never the lexicon's answer for a dictionary word
                options=pb.DecodeOptions(return_attention=False, beam_size=beam_size, bypass_lexicon=True,
                                         length_penalty_alpha=alpha, allow_unknown_symbols=allow_unknown)),
                timeout=timeout_s)
            hyps.update({s: list(r.output_tokens) for s, r in zip(chunk, reply.results)})
    return hyps


def engine_hyps(engine, sources, options=None, batch_size: int = 256) -> dict[tuple[str, ...], list[str]]:
    """The best output of every source through the ONNX engine, in-process, in batches sorted by
    length: the one in-process evaluation loop (export, quantize, report and --bundle use it)."""
    from service.engine.beam import beam_search
    from service.engine.decoding import settle
    from service.domain import DecodeOptions

    options = options or DecodeOptions()
    hyps = {}
    ordered = sorted(sources, key=len)
    for i in range(0, len(ordered), batch_size):
        chunk = [list(s) for s in ordered[i:i + batch_size]]
        if options.beam_size == 1:
            best = [[d] for d in engine.decode(chunk, [options.max_output_len] * len(chunk),
                                               [options.attention_top_k] * len(chunk))]
        else:
            best = beam_search(engine, chunk, options)
        best = settle(engine, best, [options] * len(chunk))  # the bundle's prosody memory, where it has one
        hyps.update({tuple(s): h[0].output_tokens for s, h in zip(chunk, best)})
    return hyps


def evaluate_engine(engine, refs: dict, options=None) -> dict:
    """WER/PER of the engine's best outputs on these references."""
    s = score(engine_hyps(engine, list(refs), options), refs)
    return {"wer": s.wer, "per": s.per, "words": s.words}


def hyps_from_bundle(path: str, sources: list, batch: int, beam_size: int, alpha: float, precision: str,
                     texts: bool = False):
    """The bundle's best outputs of token sequences or, with texts, of raw spellings (keyed by the
    spelling, read as the server reads one: normalized, then tokenized)."""
    from service.engine.bundle import load_bundle
    from service.domain import DecodeOptions
    from service.engine.engine import Engine, EngineConfig

    engine = Engine(load_bundle(path), EngineConfig(intra_op_threads=0, precision=precision))
    options = DecodeOptions(beam_size=beam_size, length_penalty_alpha=alpha)
    if not texts:
        return engine_hyps(engine, sources, options, batch)
    tokens = {text: tuple(engine.tokenize(text)) for text in sources}
    hyps = engine_hyps(engine, sorted(set(tokens.values())), options, batch)
    return {text: hyps[t] for text, t in tokens.items()}


def gold_report(args) -> dict:
    """--gold: the task scorer's WER of the bundle's or the server's outputs on the gold file's lines."""
    rows = read_lines(args.gold)
    texts = sorted({src for src, _ in rows})
    if args.server:  # one character a token: source_text() gives back each spelling unchanged
        by_chars = hyps_from_server(args.server, [tuple(t) for t in texts], "chars", args.batch, args.timeout_s,
                                    args.beam_size, args.length_penalty_alpha, args.model, allow_unknown=True)
        hyps = {"".join(k): v for k, v in by_chars.items()}
    else:
        hyps = hyps_from_bundle(args.bundle, texts, args.batch, args.beam_size, args.length_penalty_alpha,
                                args.precision, texts=True)
    wer, wrong = gold_wer([(hyps[src], gold.split()) for src, gold in rows])
    return {"gold": str(args.gold), "wer_percent": round(wer, 4), "wrong": wrong, "words": len(rows)}


def manifest_of(args) -> Manifest:
    """The bundle's manifest, or the served model's (ModelInfo.manifest_json, of any known format)."""
    if args.bundle:
        from service.engine.bundle import load_bundle

        return load_bundle(args.bundle).manifest
    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    with grpc.insecure_channel(args.server) as channel:
        info = pbg.TransducerStub(channel).GetModelInfo(pb.GetModelInfoRequest(model_name=args.model),
                                                        timeout=args.timeout_s)
    return as_manifest(json.loads(info.manifest_json))


@dataclass(frozen=True)
class EvalConfig:
    server: str | None = setting(None, "host:port of a running attnserve server")  # or --bundle
    bundle: str | None = setting(None, "a bundle directory, decoded in-process")
    model: str = setting("", "with --server: the model to score (default: the server's default)")
    split: str = setting("test", "the manifest's split to score", choices=("train", "dev", "test"))
    batch: int = setting(64, "inputs per request")
    timeout_s: float = setting(60.0, "with --server: the deadline of each request")
    beam_size: int = setting(1, "1 = greedy")
    length_penalty_alpha: float = setting(0.0, "the beam ranks a hypothesis by log_prob / length ** alpha; "
                                          "0 = by log_prob")
    precision: str = setting("fp32", "with --bundle: its graphs", choices=("fp32", "int8"))
    gold: str | None = setting(None, "score this spelling<TAB>segments file (the SIGMORPHON scorer's WER) instead of "
                               "the manifest's --split")


WHERE = ("server", "bundle")  # one or the other


def parse_args(argv=None) -> EvalConfig:
    """EvalConfig from flags, --server and --bundle one or the other."""
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fields(p.add_mutually_exclusive_group(required=True), EvalConfig,
               skip=tuple(f.name for f in fields(EvalConfig) if f.name not in WHERE))
    add_fields(p, EvalConfig, skip=WHERE)
    try:
        return EvalConfig(**values(EvalConfig, vars(p.parse_args(argv))))
    except ValueError as e:
        p.error(str(e))


def main(argv=None):
    args = parse_args(argv)
    manifest = manifest_of(args)
    if args.gold:
        started = time.perf_counter()
        report = gold_report(args)
        print(json.dumps({"model": manifest.name, "version": manifest.version, **report,
                          "via": f"server {args.server}" if args.server else f"bundle {args.bundle} ({args.precision})",
                          "decoding": decoding_name(args), "seconds": round(time.perf_counter() - started, 2)},
                         indent=2, ensure_ascii=False))
        return
    data = manifest.data
    refs = load_refs(data, args.split)
    sources = sorted(refs)
    started = time.perf_counter()
    if args.server:
        hyps = hyps_from_server(args.server, sources, manifest.src_tokenization, args.batch, args.timeout_s,
                                args.beam_size, args.length_penalty_alpha, args.model)
    else:
        hyps = hyps_from_bundle(args.bundle, sources, args.batch, args.beam_size, args.length_penalty_alpha,
                                args.precision)
    seconds = time.perf_counter() - started
    s = score(hyps, refs)
    report = {"model": manifest.name, "version": manifest.version, "split": args.split,
              "via": f"server {args.server}" if args.server else f"bundle {args.bundle} ({args.precision})",
              "decoding": decoding_name(args),
              "wer": round(s.wer, 4), "per": round(s.per, 4), "words": s.words, "seconds": round(seconds, 2)}
    if data.get("keep_stress"):  # the standard benchmark strips stress: score that too
        plain = stress_stripped(hyps, refs)
        report.update(wer_stress_stripped=round(plain.wer, 4), per_stress_stripped=round(plain.per, 4))
    print(json.dumps(report, indent=2))


def decoding_name(args) -> str:
    return "greedy" if args.beam_size == 1 else f"beam {args.beam_size}, alpha {args.length_penalty_alpha}"


def stress_stripped(hyps: dict, refs: dict):
    """WER/PER with the stress digits (AH0, EY1) removed from outputs and references alike; a word's
    references that differ only in stress become one."""
    return score({src: list(strip_stress(h)) for src, h in hyps.items()},
                 {src: list(dict.fromkeys(strip_stress(r) for r in rs)) for src, rs in refs.items()})


if __name__ == "__main__":
    main()
