"""Export a checkpoint to an ONNX model bundle and check parity with PyTorch.

    python -m training.export --checkpoint runs/g2p-en/best.pt --out models/g2p-en/1

Two graphs, an encoder and one decoder step, are what the server drives: it owns
the step loop, so sequences can join and leave a running batch between steps
(continuous batching) and beam search reorders rows between steps. For request-level
greedy decoding in one call the engine wraps the step graph in an ONNX Loop when it
loads (service/engine/loop_graph.py). Parity with PyTorch is checked through both paths.

The legacy TorchScript exporter is used (dynamo=False): on torch 2.13 the dynamo
exporter can freeze the time axis of RNN layers, and the tests check that batch
and source length stay dynamic at sizes different from the export example.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from attnserve.bundle import FORMAT_VERSION, hints, write
from attnserve.bundle.text_policy import text_policy
from attnserve.config import parse, setting
from training.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab, recorded_file, references
from training.ensemble import Ensemble, check_members, held_out_data
from training.evaluate import evaluate_engine, load_splits
from training.lexicon import write_lexicon
from training.model import DecoderState, ModelConfig, Seq2Seq
from training.train import collate

OPSET = 17


def encoder_outputs(model: Seq2Seq) -> list[str]:
    """The encoder graph's outputs: what the decoder steps read, then the self-attention weights.

    Without attention the decoder never reads enc_out or keys; pad_mask still travels,
    for the engine to know each source's length when it trims a batch.
    """
    source = ["enc_out", "keys", "pad_mask"] if model.decoder.has_attention else ["pad_mask"]
    return source + model.decoder.state_names + (["self_attn"] if model.cfg.self_attention_heads else [])


def decoder_inputs(model: Seq2Seq) -> list[str]:
    """The decoder-step graph's inputs. `top_k` (B,) is each row's attention mode at inference:
    an input of the one graph, rather than one exported graph per mode, so that rows decoding
    soft, hard and top-k share a continuous batch and parity covers every mode."""
    source = ["enc_out", "keys", "pad_mask", "top_k"] if model.decoder.has_attention else []
    return ["y_prev", *model.decoder.state_names, *source]


def decoder_outputs(model: Seq2Seq) -> list[str]:
    """log_probs, the next state and, with attention only, `attn`: a model without attention has none."""
    return ["log_probs", *[f"{n}_next" for n in model.decoder.state_names]] + (
        ["attn"] if model.decoder.has_attention else [])


class EncoderGraph(nn.Module):
    """(src, src_len) -> the outputs named by encoder_outputs()."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model
        self.names = encoder_outputs(model)

    def forward(self, src, src_len):
        enc = self.model.encode(src, src_len)
        values = {**enc._asdict(), **enc.state._asdict()}
        return tuple(values[n] for n in self.names)


class DecoderStepGraph(nn.Module):
    """One decoder step: the inputs named by decoder_inputs() -> those named by decoder_outputs()."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.decoder = model.decoder
        self.names = decoder_inputs(model)

    def forward(self, *inputs):
        x = dict(zip(self.names, inputs))
        state = DecoderState(x["h"], x.get("c"), x.get("feed"), x.get("align"))
        state, out, attn = self.decoder.step(x["y_prev"], state, x.get("enc_out"), x.get("keys"),
                                             x.get("pad_mask"), x.get("top_k"))
        next_state = [getattr(state, n) for n in self.decoder.state_names]
        return (self.decoder.log_probs(out), *next_state) + ((attn,) if attn is not None else ())


class FoldedGRUStep(nn.Module):
    """The decoder step of a one-layer GRU decoder that reads only the previous token's embedding
    (attention none, context init: g2p-en's architecture), with the input projection folded into a
    table. W_ih·embed(y) + b_ih depends on y alone, so it is one row of a (V, 3H) table rather than
    a (B, E) x (E, 3H) product at every step: the step reads half the weights and does half the
    multiply-adds. The gates are nn.GRU's (r, z, n order); the export's parity run checks them."""

    def __init__(self, decoder: nn.Module):
        super().__init__()
        rnn = decoder.rnn
        with torch.no_grad():
            self.register_buffer("gi_table", decoder.embed.weight @ rnn.weight_ih_l0.T + rnn.bias_ih_l0)  # (V, 3H)
        self.w_hh, self.b_hh = rnn.weight_hh_l0, rnn.bias_hh_l0  # (3H, H), (3H,)
        self.generator = decoder.generator
        self.H = rnn.hidden_size  # a Python int: constant slices in the graph

    @staticmethod
    def applies(model: Seq2Seq) -> bool:
        d = model.decoder  # an ensemble's has no .rnn (its members need attention anyway)
        rnn = getattr(d, "rnn", None)
        return isinstance(rnn, nn.GRU) and rnn.num_layers == 1 and not d.feeds and not d.has_attention

    def forward(self, y_prev, h):
        # y_prev (B,), h (1, B, H) -> log_probs (B, V), h_next (1, B, H)
        gi = self.gi_table[y_prev]  # (B, 3H)
        gh = torch.addmm(self.b_hh, h[0], self.w_hh.T)  # (B, 3H)
        H = self.H
        gi_rz, gi_n = gi.split([2 * H, H], dim=-1)
        gh_rz, gh_n = gh.split([2 * H, H], dim=-1)
        r, z = torch.sigmoid(gi_rz + gh_rz).split([H, H], dim=-1)  # (B, H) reset and update gates
        n = torch.tanh(gi_n + r * gh_n)  # (B, H) candidate
        h_next = (1 - z) * n + z * h[0]  # (B, H)
        return torch.log_softmax(self.generator(h_next), dim=-1), h_next[None]


def decoder_step_graph(model: Seq2Seq) -> nn.Module:
    return FoldedGRUStep(model.decoder) if FoldedGRUStep.applies(model) else DecoderStepGraph(model)


# What a saved checkpoint (--save-checkpoint) keeps of a training checkpoint: what rebuilding the model needs.
SAVED_KEYS = ("model_config", "train_config", "data", "src_vocab", "tgt_vocab", "state_dict", "epoch", "dev_wer",
              "dev_per")


def load_checkpoint(path: Path) -> tuple[Seq2Seq | Ensemble, dict]:
    """A training checkpoint, or one --save-checkpoint wrote, which for an ensemble holds its members."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if "members" in ckpt:
        return load_ensemble(ckpt["members"], [f"{path} member {i}" for i in range(len(ckpt["members"]))])
    return model_of(ckpt), ckpt


def model_of(ckpt: dict) -> Seq2Seq:
    """One model's checkpoint -> the model, in eval mode."""
    model = Seq2Seq(ModelConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def load_ensemble(ckpts: list[dict], names: list) -> tuple[Ensemble, dict]:
    """Members' checkpoints -> the ensemble and a checkpoint-like dict describing it."""
    check_members(ckpts, names)
    model = Ensemble([model_of(c) for c in ckpts]).eval()
    first = ckpts[0]
    max_len = max(c["train_config"]["max_output_len"] for c in ckpts)
    return model, {"members": ckpts, "model_config": model.cfg.to_dict(), "src_vocab": first["src_vocab"],
                   "tgt_vocab": first["tgt_vocab"], "data": held_out_data(first["data"]),
                   "train_config": {**first["train_config"], "max_output_len": max_len}}


def load_models(paths: list[Path]) -> tuple[Seq2Seq | Ensemble, dict]:
    """One checkpoint: its model. Several: their ensemble (training/ensemble.py)."""
    if len(paths) == 1:
        return load_checkpoint(paths[0])
    return load_ensemble([torch.load(p, map_location="cpu", weights_only=False) for p in paths], paths)


def saved_checkpoint(ckpt: dict) -> dict:
    """What --save-checkpoint keeps: no optimizer, no history."""
    if "members" in ckpt:
        return {"members": [saved_checkpoint(m) for m in ckpt["members"]]}
    return {k: ckpt[k] for k in SAVED_KEYS}


def training_summary(ckpt: dict) -> dict:
    """The manifest's `training`: a saved checkpoint (--save-checkpoint), re-exported, has no history left."""
    if "members" in ckpt:
        return {"members": [training_summary(m) for m in ckpt["members"]]}
    history = ckpt.get("history", [])
    return {"epochs": len(history), "best_epoch": ckpt["epoch"], "history": history,
            "minutes": history[-1]["minutes"] if history else 0.0}


def export_graphs(model: Seq2Seq, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # Example sizes chosen to differ from anything the tests use, so a frozen axis shows.
    B, S = 3, 7
    src = torch.randint(4, model.cfg.src_vocab_size, (B, S))
    src_len = torch.tensor([7, 5, 2])
    batch, source = {0: "batch"}, {0: "batch", 1: "src_time"}
    axes = {"src": source, "src_len": batch, "enc_out": source, "keys": source, "pad_mask": source,
            "self_attn": {0: "batch", 2: "src_time", 3: "src_time"}, "h": {1: "batch"}, "c": {1: "batch"},
            "feed": batch, "align": source, "y_prev": batch, "top_k": batch, "log_probs": batch, "attn": source}
    axes.update({f"{n}_next": axes[n] for n in ("h", "c", "feed", "align")})
    enc_names, in_names, out_names = encoder_outputs(model), decoder_inputs(model), decoder_outputs(model)
    # Wrappers in eval mode: the exporter restores each wrapper's mode afterwards,
    # and a fresh nn.Module is in training mode (dropout on) by default.
    torch.onnx.export(
        EncoderGraph(model).eval(), (src, src_len), str(out / "encoder.onnx"), dynamo=False, opset_version=OPSET,
        input_names=["src", "src_len"], output_names=enc_names,
        dynamic_axes={n: axes[n] for n in ["src", "src_len", *enc_names]})
    with torch.no_grad():
        enc = model.encode(src, src_len)
    example = {**enc._asdict(), **enc.state._asdict(), "y_prev": torch.full((B,), BOS_ID, dtype=torch.long),
               "top_k": torch.tensor([0, 1, 2])}  # soft, hard, top-2: one graph serves every mode
    torch.onnx.export(
        decoder_step_graph(model).eval(), tuple(example[n] for n in in_names), str(out / "decoder_step.onnx"),
        dynamo=False, opset_version=OPSET, input_names=in_names, output_names=out_names,
        dynamic_axes={n: axes[n] for n in in_names + out_names})


def parity(model: Seq2Seq, engine, sources: list[tuple[str, ...]], src_vocab: Vocab, max_len: int,
           batch_size: int = 256, top_k: int = 0) -> dict:
    """Greedy outputs of PyTorch and of the ONNX engine on the same batches, with attention mode top_k
    (0 soft, 1 hard, k top-k). max_attn_abs_diff covers the decoder's attention and, when the model
    has it, the encoder's self-attention."""
    model.eval()
    mismatches, max_diff = 0, 0.0
    ordered = sorted(sources, key=len)
    for i in range(0, len(ordered), batch_size):
        chunk = [list(s) for s in ordered[i:i + batch_size]]
        read = [engine.hints.extend(s) if engine.hints else s for s in chunk]  # as the engine reads them
        src, src_len, _, _ = collate([(src_vocab.encode(s), []) for s in read])
        modes = torch.full((len(chunk),), top_k, dtype=torch.long)
        tokens, out_len, _, attn = model.greedy(src, src_len, max_len, top_k=modes)
        with torch.no_grad():
            self_attn = model.encode(src, src_len).self_attn  # (B, heads, S, S) or None
        onnx_out = engine.decode(chunk, [max_len] * len(chunk), top_k=[top_k] * len(chunk))
        for b, d in enumerate(onnx_out):
            n, S = int(out_len[b]), len(chunk[b])
            ref = [t for t in tokens[b, :n].tolist() if t != EOS_ID]
            if ref != d.output_ids or (attn is None) != (d.attn is None) or (
                    attn is not None and d.attn.shape != (n, S)):
                mismatches += 1
                continue
            if attn is not None:
                max_diff = max(max_diff, float(np.abs(attn[b, :n, :S].numpy() - d.attn).max()))
            if self_attn is not None:
                max_diff = max(max_diff, float(np.abs(self_attn[b, :, :S, :S].numpy() - d.self_attn).max()))
    return {"words": len(sources), "output_mismatches": mismatches, "max_attn_abs_diff": max_diff}


def bundle_hints(out: Path, record: dict, splits: dict) -> dict:
    """Copy the source hints a model trained with (train.py --source-hints) into its bundle; the manifest's
    `source_hints`. A symbol only hints bring is not one a served word may have (Engine.alphabet)."""
    (out / hints.FILE).write_bytes(recorded_file(record).read_bytes())
    own = {c for split in ("train", "dev") for p in splits[split] for c in p.src}
    brought = hints.SourceHints(hints.read(out / hints.FILE), record["separator"]).symbols()
    return {"file": hints.FILE, "separator": record["separator"], "words": record["words"],
            "trained_with": record["path"], "hint_only_symbols": sorted(brought - own)}


def build_bundle(checkpoint: Path | list[Path], out: Path, name: str, version: str, parity_words: int,
                 lexicon: bool = True, save_checkpoint: Path | None = None) -> dict:
    """Export one checkpoint, or the ensemble of several, to a bundle with its parity checks and metrics
    (and, unless told not to, its corpus as the lexicon the server answers first); the manifest's JSON
    object. The bundle holds what serving reads, no checkpoint: `save_checkpoint` is where, outside it,
    the weights exported (an ensemble's members in one file) are kept for fine-tuning or re-export."""
    import onnx
    import onnxruntime

    from service.engine.bundle import load_bundle
    from service.engine.engine import Engine, EngineConfig

    model, ckpt = load_models(checkpoint if isinstance(checkpoint, list) else [checkpoint])
    data = ckpt["data"]
    src_vocab, tgt_vocab = Vocab(ckpt["src_vocab"]), Vocab(ckpt["tgt_vocab"])
    max_len = ckpt["train_config"]["max_output_len"]
    splits = load_splits(data)
    export_graphs(model, out)
    if save_checkpoint is not None:
        save_checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save(saved_checkpoint(ckpt), save_checkpoint)
    manifest = {
        "format_version": FORMAT_VERSION, "name": name, "version": version, "created_unix": int(time.time()),
        "graphs": {"encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx"},
        "src_vocab": src_vocab.itos, "tgt_vocab": tgt_vocab.itos,
        "special_ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
        "src_tokenization": data["src_tokens"], "tgt_tokenization": data["tgt_tokens"],
        # what the server does to a source before tokenizing it (attnserve/bundle/normalization.py)
        **text_policy(data, splits, src_vocab.itos),
        # the language its running text is read in (service/answering/textrules.py): CMUdict's is English
        **({"language": "en"} if data["corpus"] == "cmudict" else {}),
        "max_output_len": max_len,
        "model_config": ckpt["model_config"], "train_config": ckpt["train_config"], "data": data,
        "training": training_summary(ckpt),
        # an ensemble's: its members' (a stacked ensemble also holds them repacked, training/stacked.py)
        "parameters": sum(p.numel() for m in getattr(model, "models", [model]) for p in m.parameters()),
        # What the API reports (ModelInfo): a model without attention returns no attention matrix.
        "has_attention": model.decoder.has_attention,
        "attention_modes": ["soft", "hard", "topk"] if model.decoder.has_attention else [],
        "self_attention_heads": model.cfg.self_attention_heads,
        "opset": OPSET,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
                     "python": platform.python_version()},
    }
    if data.get("source_hints"):
        manifest["source_hints"] = bundle_hints(out, data["source_hints"], splits)
    if lexicon:
        manifest = write_lexicon(out, manifest)  # every pair of the corpus: the server answers those first
    write(out, manifest)
    # Parity through both ways the server decodes: the Python step loop (continuous batching,
    # beam search) and the ONNX Loop (request-level batching); the engine's metrics use the Loop.
    step_engine = Engine(load_bundle(out), EngineConfig(intra_op_threads=0, max_output_len=max_len,
                                                        greedy_loop="python"))
    engine = Engine(load_bundle(out), EngineConfig(intra_op_threads=0, max_output_len=max_len))
    dev_refs = references(splits["dev"])
    words = sorted(dev_refs)[:parity_words]
    par = parity(model, step_engine, words, src_vocab, max_len)
    manifest["parity"] = {**par, "split": "dev", "attn_tolerance": 1e-4}
    if model.decoder.has_attention:  # hard attention, the other path through keep_top_k, on fewer words
        manifest["parity"]["hard"] = parity(model, step_engine, words[:parity_words // 4], src_vocab,
                                            max_len, top_k=1)
    manifest["parity"]["onnx_loop"] = parity(model, engine, words, src_vocab, max_len)
    manifest["metrics"] = {"dev": evaluate_engine(engine, dev_refs), "measured_with": "onnxruntime, greedy"}
    if splits["test"]:
        manifest["metrics"]["test"] = evaluate_engine(engine, references(splits["test"]))
    return write(out, manifest).to_dict()


@dataclass(frozen=True)
class ExportConfig:
    checkpoint: list[Path] = setting(doc="a training checkpoint; several export their ensemble (training/ensemble.py)")
    out: Path = setting(doc="bundle directory, models/<name>/<version>")
    name: str | None = setting(None, "model name (default: the parent directory of --out)")
    parity_words: int = setting(2000, "dev words the parity checks decode with PyTorch and with the graphs")
    no_lexicon: bool = setting(False, "ship no lexicon: every input is decoded by the model", switch=True)
    save_checkpoint: Path | None = setting(None, "also save the exported weights here (an ensemble's members in "
                                           "one file), outside the bundle")


def main(argv=None):
    args = parse(ExportConfig, argv, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    name = args.name or args.out.parent.name
    manifest = build_bundle(args.checkpoint, args.out, name, args.out.name, args.parity_words,
                            lexicon=not args.no_lexicon, save_checkpoint=args.save_checkpoint)
    par = manifest["parity"]
    print(json.dumps({"parity": par, "metrics": manifest["metrics"]}, indent=2))
    if not parity_ok(par):
        raise SystemExit(f"parity check FAILED: {par}")


def parity_checks(par: dict) -> list[dict]:
    """Every parity check in a manifest's `parity`: soft attention through the step loop, hard
    attention (models with attention) and the ONNX Loop (bundles exported since it exists)."""
    return [par] + [par[k] for k in ("hard", "onnx_loop") if k in par]


def parity_ok(par: dict) -> bool:
    """Outputs equal and attention within tolerance, in every check."""
    return all(p["output_mismatches"] == 0 and p["max_attn_abs_diff"] <= 1e-4 for p in parity_checks(par))


if __name__ == "__main__":
    main()
