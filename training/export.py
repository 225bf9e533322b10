"""Export a checkpoint to an ONNX model bundle and check parity with PyTorch.

    python -m training.export --checkpoint runs/g2p-en/best.pt --out models/g2p-en/1

Why two graphs (an encoder and one decoder step) rather than one graph with an
ONNX Loop: the server drives the step loop itself, so sequences can join and
leave a running batch between steps (continuous batching), a per-request length
limit applies, and attention comes back at every step without a Loop's scan
outputs. The cost is one onnxruntime call per step, measured by `make bench`.

The legacy TorchScript exporter is used (dynamo=False): on torch 2.13 the dynamo
exporter can freeze the time axis of RNN layers, and the tests check that batch
and source length stay dynamic at sizes different from the export example.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from training.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab, load_cmudict, load_tsv, references
from training.metrics import score
from training.model import ModelConfig, Seq2Seq
from training.train import collate

OPSET = 17


class EncoderGraph(nn.Module):
    """(src, src_len) -> enc_out, keys, pad_mask and the decoder's initial state."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model

    def forward(self, src, src_len):
        enc_out, keys, pad_mask, state = self.model.encode(src, src_len)
        if state.c is None:
            return enc_out, keys, pad_mask, state.h, state.feed
        return enc_out, keys, pad_mask, state.h, state.c, state.feed


class DecoderStepGraph(nn.Module):
    """One decoder step: (y_prev, state, enc_out, keys, pad_mask) -> log_probs, next state, attn."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, y_prev, h, *rest):
        from training.model import DecoderState

        if self.decoder.is_lstm:
            c, feed, enc_out, keys, pad_mask = rest
        else:
            (feed, enc_out, keys, pad_mask), c = rest, None
        state, attn = self.decoder.step(y_prev, DecoderState(h, c, feed), enc_out, keys, pad_mask)
        log_probs = self.decoder.log_probs(state.feed)  # (B, V)
        if state.c is None:
            return log_probs, state.h, state.feed, attn
        return log_probs, state.h, state.c, state.feed, attn


def load_checkpoint(path: Path) -> tuple[Seq2Seq, dict]:
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    model = Seq2Seq(ModelConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    return model, ckpt


def export_graphs(model: Seq2Seq, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lstm = model.cfg.cell == "lstm"
    state = ["h", "c", "feed"] if lstm else ["h", "feed"]
    # Example sizes chosen to differ from anything the tests use, so a frozen axis shows.
    B, S = 3, 7
    src = torch.randint(4, model.cfg.src_vocab_size, (B, S))
    src_len = torch.tensor([7, 5, 2])
    batch, source = {0: "batch"}, {0: "batch", 1: "src_time"}
    state_axes = {"h": {1: "batch"}, "c": {1: "batch"}, "feed": {0: "batch"}}
    # Wrappers in eval mode: the exporter restores each wrapper's mode afterwards,
    # and a fresh nn.Module is in training mode (dropout on) by default.
    torch.onnx.export(
        EncoderGraph(model).eval(), (src, src_len), str(out / "encoder.onnx"), dynamo=False, opset_version=OPSET,
        input_names=["src", "src_len"], output_names=["enc_out", "keys", "pad_mask", *state],
        dynamic_axes={"src": source, "src_len": batch, "enc_out": source, "keys": source, "pad_mask": source,
                      **{n: state_axes[n] for n in state}})
    with torch.no_grad():
        enc_out, keys, pad_mask, init = model.encode(src, src_len)
    init_tensors = [init.h, init.c, init.feed] if lstm else [init.h, init.feed]
    y_prev = torch.full((B,), BOS_ID, dtype=torch.long)
    torch.onnx.export(
        DecoderStepGraph(model).eval(), (y_prev, *init_tensors, enc_out, keys, pad_mask), str(out / "decoder_step.onnx"),
        dynamo=False, opset_version=OPSET,
        input_names=["y_prev", *state, "enc_out", "keys", "pad_mask"],
        output_names=["log_probs", *[f"{n}_next" for n in state], "attn"],
        dynamic_axes={"y_prev": batch, **{n: state_axes[n] for n in state}, "enc_out": source, "keys": source,
                      "pad_mask": source, "log_probs": batch, "attn": source,
                      **{f"{n}_next": state_axes[n] for n in state}})


def parity(model: Seq2Seq, engine, sources: list[tuple[str, ...]], src_vocab: Vocab, max_len: int,
           batch_size: int = 256) -> dict:
    """Greedy outputs of PyTorch and of the ONNX engine on the same batches."""
    model.eval()
    mismatches, max_diff = 0, 0.0
    ordered = sorted(sources, key=len)
    for i in range(0, len(ordered), batch_size):
        chunk = [list(s) for s in ordered[i:i + batch_size]]
        src, src_len, _, _ = collate([(src_vocab.encode(s), []) for s in chunk])
        tokens, out_len, _, attn = model.greedy(src, src_len, max_len)
        onnx_out = engine.decode(chunk, [max_len] * len(chunk))
        for b, d in enumerate(onnx_out):
            n = int(out_len[b])
            ref = [t for t in tokens[b, :n].tolist() if t != EOS_ID]
            if ref != d.output_ids or d.attn.shape != (n, len(chunk[b])):
                mismatches += 1
                continue
            max_diff = max(max_diff, float(np.abs(attn[b, :n, :len(chunk[b])].numpy() - d.attn).max()))
    return {"words": len(sources), "output_mismatches": mismatches, "max_attn_abs_diff": max_diff}


def evaluate_engine(engine, refs: dict, batch_size: int = 256) -> dict:
    hyps = {}
    ordered = sorted(refs, key=len)
    for i in range(0, len(ordered), batch_size):
        chunk = ordered[i:i + batch_size]
        for s, d in zip(chunk, engine.decode([list(s) for s in chunk])):
            hyps[s] = d.output_tokens
    sc = score(hyps, refs)
    return {"wer": sc.wer, "per": sc.per, "words": sc.words}


def build_bundle(checkpoint: Path, out: Path, name: str, version: str, parity_words: int) -> dict:
    import onnx
    import onnxruntime

    from service.bundle import load_bundle, write_manifest
    from service.engine import Engine, EngineConfig

    model, ckpt = load_checkpoint(checkpoint)
    data = ckpt["data"]
    src_vocab, tgt_vocab = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    max_len = ckpt["train_config"]["max_output_len"]
    export_graphs(model, out)
    # The PyTorch weights travel with the graphs: for fine-tuning, and for `make bench`'s
    # naive-server peer. Only what rebuilding the model needs (no optimizer, no history).
    torch.save({k: ckpt[k] for k in ("model_config", "train_config", "data", "src_vocab", "tgt_vocab",
                                     "state_dict", "epoch", "dev_wer", "dev_per")}, out / "checkpoint.pt")
    manifest = {
        "name": name, "version": version, "created_unix": int(time.time()),
        "graphs": {"encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx"},
        "src_vocab": src_vocab.itos, "tgt_vocab": tgt_vocab.itos,
        "special_ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
        "lowercase_input": data["corpus"] == "cmudict",
        "max_output_len": max_len,
        "model_config": ckpt["model_config"], "train_config": ckpt["train_config"], "data": data,
        "training": {"epochs": len(ckpt["history"]), "best_epoch": ckpt["epoch"], "history": ckpt["history"],
                     "minutes": ckpt["history"][-1]["minutes"] if ckpt["history"] else 0.0},
        "parameters": sum(p.numel() for p in model.parameters()),
        "opset": OPSET,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
                     "python": platform.python_version()},
    }
    write_manifest(out, manifest)
    engine = Engine(load_bundle(out), EngineConfig(intra_op_threads=0, max_output_len=max_len))
    splits = (load_cmudict(keep_stress=data["keep_stress"]) if data["corpus"] == "cmudict"
              else load_tsv(data["path"], data["src_tokens"], data["tgt_tokens"]))
    dev_refs = references(splits["dev"])
    par = parity(model, engine, sorted(dev_refs)[:parity_words], src_vocab, max_len)
    manifest["parity"] = {**par, "split": "dev", "attn_tolerance": 1e-4}
    manifest["metrics"] = {"dev": evaluate_engine(engine, dev_refs), "measured_with": "onnxruntime, greedy"}
    if splits["test"]:
        manifest["metrics"]["test"] = evaluate_engine(engine, references(splits["test"]))
    write_manifest(out, manifest)
    return manifest


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="bundle directory, models/<name>/<version>")
    p.add_argument("--name", help="model name (default: the parent directory of --out)")
    p.add_argument("--parity-words", type=int, default=2000)
    args = p.parse_args(argv)
    name = args.name or args.out.parent.name
    manifest = build_bundle(args.checkpoint, args.out, name, args.out.name, args.parity_words)
    par = manifest["parity"]
    print(json.dumps({"parity": par, "metrics": manifest["metrics"]}, indent=2))
    if par["output_mismatches"] or par["max_attn_abs_diff"] > 1e-4:
        raise SystemExit(f"parity check FAILED: {par}")


if __name__ == "__main__":
    main()
