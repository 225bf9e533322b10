"""Starting a training run from another run's checkpoint (`python -m training.train --init-from`).

With the same vocabularies the checkpoint's weights carry over as they are (to go on training with a
lower learning rate, say). With `--init-vocab by-symbol` it may come from other data (other languages):
every weight carries over, and in the rows kept per vocabulary symbol (embeddings, output layer) each
symbol both vocabularies have takes its row; a symbol new here keeps its fresh initialization.
"""
from __future__ import annotations

from pathlib import Path

import torch

from training.data import Vocab
from training.model import ModelConfig, Seq2Seq

# The parameters with a row per vocabulary symbol, and which vocabulary ("src" or "tgt").
VOCAB_ROWS = {"encoder.embed.weight": "src", "decoder.embed.weight": "tgt", "decoder.generator.weight": "tgt",
              "decoder.generator.bias": "tgt"}


def carry_by_symbol(model: Seq2Seq, ckpt: dict, src_itos: list[str], tgt_itos: list[str]) -> dict:
    """A state dict for `model` (this corpus's vocabularies) from a checkpoint trained on other data.
    Returns {"state_dict": ..., "symbols_carried": {"src": [n, of], "tgt": [n, of]}}."""
    state = {k: v.clone() for k, v in ckpt["state_dict"].items()}
    fresh = model.state_dict()
    counts = {}
    for which, new_itos, old_itos in (("src", src_itos, ckpt["src_vocab"]), ("tgt", tgt_itos, ckpt["tgt_vocab"])):
        old_index = {t: i for i, t in enumerate(old_itos)}
        shared = [(i, old_index[t]) for i, t in enumerate(new_itos) if t in old_index]
        counts[which] = [len(shared), len(new_itos)]
        for name in (n for n, w in VOCAB_ROWS.items() if w == which):
            rows = fresh[name].clone()
            new_ids, old_ids = (torch.tensor(x) for x in zip(*shared))
            rows[new_ids] = state[name][old_ids]
            state[name] = rows
    return {"state_dict": state, "symbols_carried": counts}


def model_from_checkpoint(init_from: Path, init_vocab: str, src_vocab: Vocab, tgt_vocab: Vocab,
                          data_desc: dict) -> tuple[ModelConfig, Seq2Seq, dict]:
    """The checkpoint's model config and weights for this corpus's vocabularies, and `data_desc` with
    where training continued from. `init_vocab`: "same" (refuse other vocabularies) or "by-symbol"."""
    ckpt = torch.load(init_from, map_location="cpu", weights_only=False)
    if "members" in ckpt:
        raise SystemExit(f"{init_from} is an ensemble's checkpoint: --init-from takes one model's")
    same = ckpt["src_vocab"] == src_vocab.itos and ckpt["tgt_vocab"] == tgt_vocab.itos
    if not same and init_vocab == "same":
        raise SystemExit(f"{init_from}: vocabularies differ from this corpus's "
                         f"(--init-vocab by-symbol carries the shared symbols' rows over)")
    cfg = ModelConfig(**{**ckpt["model_config"], "src_vocab_size": len(src_vocab), "tgt_vocab_size": len(tgt_vocab)})
    model = Seq2Seq(cfg)
    carried = {} if same else carry_by_symbol(model, ckpt, src_vocab.itos, tgt_vocab.itos)
    model.load_state_dict(ckpt["state_dict"] if same else carried.pop("state_dict"))
    data_desc = {**data_desc, "continued_from": {"checkpoint": str(init_from), "epoch": ckpt["epoch"],
                                                 "dev_wer": ckpt["dev_wer"], "history": ckpt["history"], **carried}}
    return cfg, model, data_desc
