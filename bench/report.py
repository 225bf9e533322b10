"""Ratios, targets, and the JSON / markdown / PNG outputs of `make bench`."""
from __future__ import annotations

import json
import time
from pathlib import Path

from bench.sweep import best


def loop_rows(engine: dict) -> list[tuple[str, float, float, float]]:
    """(precision/batch, ONNX Loop words/s, step loop words/s, ratio) where both were measured."""
    rows = []
    for key, step in engine.items():
        precision, loop, rest = key.split("/", 2)
        onnx = engine.get(f"{precision}/greedy-loop=onnx/{rest}")
        if loop == "greedy-loop=python" and onnx:
            rows.append((f"{precision}/{rest}", onnx, step, onnx / step))
    return rows


MODES = ("continuous", "request")
SHIPPED = "shipped g2p-en, {}"  # bench/frontier.py's labels
G2P_EN_OURS = tuple(f"g2p-en's architecture (GRU, no attention), ours, {p}" for p in ("int8", "fp32"))
G2P_EN_LOOP = "g2p-en (its numpy loop)"
COMPACT = ("compact, int8", "compact, fp32")


def ceiling(r: dict) -> tuple[str, float]:
    """E: the fastest in-process engine run in the precision the server serves."""
    return best(r["engine"], r.get("served_precision", "fp32") + "/")


def server_rows(r: dict, mode: str) -> list[tuple[str, float, float, str]]:
    """Targets 1-5 for one batching mode's runs, in the served precision."""
    c = r[mode]
    e_key, E = ceiling(r)
    a, b, stream = c["a_1word_c64"], c["b_16words_c16"], c["c_stream"]
    loop = "onnx" if mode == "request" else "python"  # the greedy loop each mode decodes with
    decode_1_ms = r["engine_latency"][loop]["p50_ms"]
    bound_4 = r["echo_unloaded"]["p50_ms"] + decode_1_ms + 0.2
    ol = c["open_loop"]["70%"]
    return [
        ("1. (b) 16 words/request >= 0.9 x E", b["words_per_s"] / E, 0.9,
         f"(b) {b['words_per_s']:.0f} words/s; E {E:.0f} words/s ({e_key})"),
        ("2. (a) 1 word/request at concurrency 64 >= 0.85 x E", a["calls_per_s"] / E, 0.85,
         f"(a) {a['calls_per_s']:.0f} calls/s; E {E:.0f} words/s"),
        ("3. streaming >= 0.9 x E", stream["words_per_s"] / E, 0.9,
         f"stream {stream['words_per_s']:.0f} words/s; E {E:.0f} words/s"),
        ("4. unloaded p50 <= echo p50 + batch-1 decode + 0.2 ms", bound_4 / c["unloaded"]["p50_ms"], 1.0,
         f"p50 {c['unloaded']['p50_ms']:.2f} ms; bound {bound_4:.2f} ms (echo {r['echo_unloaded']['p50_ms']:.2f} "
         f"+ in-process batch-1 decode ({loop} loop) {decode_1_ms:.2f} + 0.2)"),
        ("5. open loop 70%: p99 <= 1.5 x in-process p99, same arrivals",
         1.5 * ol["in_process"]["p99_ms"] / ol["p99_ms"], 1.0,
         f"at {ol['rate']:.0f} calls/s: server p99 {ol['p99_ms']:.2f} ms; in-process p99 "
         f"{ol['in_process']['p99_ms']:.2f} ms (x 1.5 = {1.5 * ol['in_process']['p99_ms']:.2f})"),
    ]


def served(points: dict, labels: tuple[str, ...]) -> dict | None:
    """Of one model's frontier points (one label per precision), the one --precision auto serves."""
    return next((points[k] for k in labels if k in points and points[k]["served"]), None)


def peer_rows(r: dict) -> list[tuple[str, float, float, str]]:
    """Targets 6 and 7, from bench/frontier.py's points."""
    f = r.get("frontier", {})
    rows = []
    ours = served(f, G2P_EN_OURS)
    loop = f.get(G2P_EN_LOOP)
    if ours and loop:
        wer = f"; test WER ours {100 * ours['wer']:.2f}%, g2p-en {100 * loop['wer']:.2f}%"
        rows += [("6a. g2p-en's model on our engine, batch 64 >= 10 x its numpy loop",
                  ours["batch64_words_per_s"] / loop["batch64_words_per_s"], 10.0,
                  f"ours {ours['batch64_words_per_s']:.0f} words/s ({ours['precision']}); g2p-en "
                  f"{loop['batch64_words_per_s']:.0f} words/s{wer}"),
                 ("6b. ... batch 1 >= 2 x its numpy loop", ours["batch1_words_per_s"] / loop["batch1_words_per_s"],
                  2.0, f"ours {ours['batch1_words_per_s']:.0f} words/s (p50 {ours['batch1_p50_ms']:.2f} ms); "
                  f"g2p-en {loop['batch1_words_per_s']:.0f} words/s (p50 {loop['batch1_p50_ms']:.2f} ms)")]
    shipped = f.get(SHIPPED.format(r.get("served_precision", "fp32")))
    compact = served(f, COMPACT)
    if shipped and compact:
        speed = compact["batch64_words_per_s"] / shipped["batch64_words_per_s"]
        dwer = 100 * (compact["wer"] - shipped["wer"])
        # Both halves must hold: the ratio is the smaller of the two margins.
        rows.append(("7. compact (<= 1.5 M parameters): WER within 1 point of shipped at >= 3 x its batch-64 "
                     "words/s", min(speed / 3.0, 1.0 / max(dwer, 1e-9) if dwer > 0 else 99.0), 1.0,
                     f"compact ({compact['parameters'] / 1e6:.2f} M, {compact['precision']}) WER "
                     f"{100 * compact['wer']:.2f}% ({dwer:+.2f} points), {speed:.2f} x shipped's "
                     f"{shipped['batch64_words_per_s']:.0f} words/s"))
    return rows


PER_TENSOR = "shipped g2p-en, int8 per tensor (onnxruntime dynamic, batch-dependent; not served)"  # frontier label


def engine_rows(r: dict) -> list[tuple[str, float, float, str]]:
    """Issue 69's engine targets: the served int8 against the machine's ceilings (bench/limits.py) and against
    the per-tensor int8 it replaced (the frontier's points, the same run)."""
    rows = []
    int8 = r.get("limits", {}).get("precisions", {}).get("int8", {})
    if b := int8.get("batch64"):
        rows.append(("8a. int8 engine, batch 64 >= 40% of the int8 GEMM ceiling (3 x issue 69's 13%)",
                     b["fraction_of_gemm"], 0.40, f"{b['words_per_s']:.0f} words/s = {b['gflops']:.1f} GFLOP/s, "
                     f"{b['fraction_of_gemm']:.0%} of the ceiling ({b['key']})"))
    f = r.get("frontier", {})
    ours, old = f.get(SHIPPED.format("int8")), f.get(PER_TENSOR)
    if ours and old:
        rows.append(("8b. int8 engine, batch 1 p50 <= the per-tensor int8's, same run",
                     old["batch1_p50_ms"] / ours["batch1_p50_ms"], 1.0,
                     f"per row {ours['batch1_p50_ms']:.2f} ms; per tensor {old['batch1_p50_ms']:.2f} ms (frontier, "
                     f"batch 64: {ours['batch64_words_per_s']:.0f} against {old['batch64_words_per_s']:.0f} words/s)"))
    if b := int8.get("batch1"):
        rows.append(("8c. int8 engine, batch 1 >= 85% of the matrix-vector ceiling from DRAM",
                     b["fraction_of_matvec_dram"], 0.85, f"{b['words_per_s']:.0f} words/s = {b['gbs']:.1f} GB/s of "
                     f"decoder weights, {b['fraction_of_matvec_dram']:.0%} of the ceiling ({b['key']})"))
    return rows


def peer_server_rows(r: dict) -> list[tuple[str, float, float, str]]:
    """Issue 69's server targets beside MLServer (bench/servers.py, two workers against MLServer at its best,
    every round): each row's ratio is its worst round's."""
    from bench.servers import ISSUE_69, round_figures

    rows = []
    for what, point, theirs, key, need, higher in ISSUE_69:
        figures = round_figures(r.get("servers", {}), point, theirs, key)
        if not figures:
            continue
        figures = figures if higher else [1 / max(x, 1e-9) for x in figures]  # MLServer's p99 / ours
        rows.append((what, min(figures), need, "each round: " + ", ".join(f"{x:.2f}" for x in figures)))
    return rows


def other_rows(r: dict) -> list[tuple[str, float, float, str]]:
    """Comparisons kept from earlier issues (not this issue's targets): the server against its engine (1-5),
    g2p-en's own package and the compact model (6-7), the naive server and int8 against fp32."""
    best_server = max(r[m][k]["words_per_s"] for m in MODES for k in ("a_1word_c64", "b_16words_c16", "c_stream"))
    rows = earlier_targets(r)
    if "naive_torch" in r:  # run only where the checkpoint was at hand (bench/run.py --checkpoint)
        rows.append((">= 10 x naive PyTorch server", best_server / r["naive_torch"]["words_per_s"], 10.0,
                     f"attnserve {best_server:.0f} words/s; naive {r['naive_torch']['words_per_s']:.0f} words/s"))
    if any(k.startswith("int8/") for k in r["engine"]) and r["wer"].get("int8"):
        (k8, int8), (k32, fp32) = best(r["engine"], "int8/", "/batch=64"), best(r["engine"], "fp32/", "/batch=64")
        dwer = 100 * (r["wer"]["int8"]["wer"] - r["wer"]["fp32"]["wer"])
        rows.append(("int8 faster at batch 64", int8 / fp32, 1.0,
                     f"int8 {int8:.0f} ({k8}) vs fp32 {fp32:.0f} words/s ({k32})"))
        rows.append(("int8 test WER within 0.1 points (served by default)", 0.1 / max(dwer, 1e-9) if dwer > 0
                     else 99.0, 1.0, f"fp32 {100 * r['wer']['fp32']['wer']:.2f}%, int8 "
                     f"{100 * r['wer']['int8']['wer']:.2f}% ({dwer:+.2f} points; make quantize's figures)"))
    return rows


def _rows(rows) -> list[dict]:
    return [{"target": t, "ratio": round(v, 3), "needed": need, "met": v >= need, "detail": d}
            for t, v, need, d in rows]


def targets(r: dict) -> list[dict]:
    """This issue's targets (issue 69): the engine against the machine and the per-tensor int8, the server
    beside MLServer."""
    return _rows(engine_rows(r) + peer_server_rows(r))


def earlier_targets(r: dict) -> list[tuple[str, float, float, str]]:
    # Targets 1-5 are read in the batching mode that does better on each, with the other's ratio beside it:
    # which mode wins where is one of the things the benchmark is for.
    per_mode = {m: server_rows(r, m) for m in MODES}
    rows = []
    for i, (name, _, need, _) in enumerate(per_mode[MODES[0]]):
        ranked = sorted(MODES, key=lambda m: per_mode[m][i][1], reverse=True)
        win, other = ranked[0], ranked[1]
        rows.append((name, per_mode[win][i][1], need,
                     f"{win}: {per_mode[win][i][3]} ({other}: {per_mode[other][i][1]:.2f})"))
    return rows + peer_rows(r)


def table(rows: list[dict]) -> list[str]:
    return ["| target | ratio | needed | met | measured |", "|---|---|---|---|---|"] + [
        f"| {x['target']} | {x['ratio']:.2f} | {x['needed']} | {'yes' if x['met'] else '**no**'} | {x['detail']} |"
        for x in rows]


def markdown(r: dict, rows: list[dict]) -> str:
    lines = [f"# attnserve benchmark ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"Machine: {r['machine']['cpus']} CPUs, {r['machine']['platform']}; {r['test_words']} test words; "
             f"{r['duration_s']} s per measurement. Client and server share the cores. Served precision: "
             f"**{r.get('served_precision', 'fp32')}** (`--precision auto`), as every server run and E below "
             "unless a row says fp32.", ""]
    lines += table(rows)
    lines += ["", "Kept from earlier issues:", ""] + table(_rows(other_rows(r)))
    if "limits" in r:
        from bench.limits import lines as limits_lines

        lines += ["", "The machine's own ceilings beside the engine (bench/limits.py):", ""] + limits_lines(r["limits"])
    lines += ["", "| server run | mode | words/s | calls/s | p50 ms | p90 ms | p99 ms | errors | client CPU | server CPU |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for mode in ("continuous", "request", "request_fp32", "request_int8_per_tensor"):
        if mode not in r:  # served in fp32 already
            continue
        runs = dict(r[mode])
        runs.update({f"open loop {k}": v for k, v in runs.pop("open_loop", {}).items()})
        label = mode.replace("_fp32", ", fp32").replace("_int8_per_tensor", ", int8 per tensor (old, batch-dependent)")
        for name, x in runs.items():
            lines.append(f"| {name} | {label} | {x['words_per_s']:.0f} | {x['calls_per_s']:.0f} | {x['p50_ms']:.2f} | "
                         f"{x['p90_ms']:.2f} | {x['p99_ms']:.2f} | {x['errors']} | {x['client_cpu_util']:.2f} | "
                         f"{x['server_cpu_util']:.2f} |")
    for name in ("echo", "echo_unloaded", "naive_torch"):
        if name not in r:
            continue
        x = r[name]
        lines.append(f"| {name} | - | {x['words_per_s']:.0f} | {x['calls_per_s']:.0f} | {x['p50_ms']:.2f} | "
                     f"{x['p90_ms']:.2f} | {x['p99_ms']:.2f} | {x['errors']} | {x['client_cpu_util']:.2f} | "
                     f"{x['server_cpu_util']:.2f} |")
    lines += ["", "Open loop (Poisson, 1 word per call): the server against the same batcher and engine driven "
              "in-process by the same arrival times (bench/inprocess.py); target 5 reads the 70% row:", "",
              "| mode | load | calls/s offered | server p50 ms | server p99 ms | in-process p50 ms | "
              "in-process p99 ms | server p99 / in-process p99 |", "|---|---|---|---|---|---|---|---|"]
    for mode in MODES:
        for k, x in r[mode]["open_loop"].items():
            ip = x["in_process"]
            lines.append(f"| {mode} | {k} | {x['rate']:.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
                         f"{ip['p50_ms']:.2f} | {ip['p99_ms']:.2f} | {x['p99_ms'] / ip['p99_ms']:.2f} |")
    if "frontier" in r:
        from bench.frontier import lines as frontier_lines

        lines += ["", "The frontier: test WER against speed, in-process onnxruntime, one intra-op thread, every "
                  "model on the same test words (bench/frontier.py; bench/results/frontier.png):", ""]
        lines += frontier_lines(r["frontier"])
    if "fairness" in r:
        from bench.fairness import lines as fairness_lines

        lines += ["", "Two models in one server (bench/fairness.py):", ""] + fairness_lines(r["fairness"])
    if "servers" in r:
        from bench.servers import lines as servers_lines

        lines += ["", "attnserve beside MLServer and BentoML running our Engine, each at its best (bench/servers.py; "
                  "docs/performance.md#beside-mlserver-and-bentoml):", ""] + servers_lines(r["servers"])
        lines += ["", "The engine's share of a call's CPU: both servers run the same engine, whose in-process "
                  "time a word is " + ", ".join(f"{1000 / v:.3f} ms at batch {k.rsplit('=', 1)[1]}"
                                                for k, v in r["engine"].items()
                                                if k.startswith(f"{r.get('served_precision', 'fp32')}/greedy-loop=onnx/")
                                                and k.rsplit("=", 1)[1] in ("1", "8", "64"))
                  + " (one thread); the rest of each server's CPU ms a call above is its own."]
    if "real_traffic" in r:
        from bench.realtraffic import lines as real_traffic_lines

        lines += ["", "Real traffic: English words by their frequency in running text, lexicon and response cache "
                  "on and off (bench/realtraffic.py; E is this run's engine ceiling):", ""]
        lines += real_traffic_lines(r["real_traffic"])
    lines += ["", "| in-process engine | words/s |", "|---|---|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in r["engine"].items()]
    lines += ["", "Greedy decoding in one ONNX Loop call vs one decoder-graph call per step (request-level "
              "batching uses the Loop; continuous batching needs the step loop):", "",
              "| precision/batch | ONNX Loop words/s | step loop words/s | Loop / step loop |",
              "|---|---|---|---|"]
    lines += [f"| {k} | {a:.0f} | {b:.0f} | {x:.2f} |" for k, a, b, x in loop_rows(r["engine"])]
    lat = r["engine_latency"]
    lines += ["", f"In-process batch-1 decode, {r.get('served_precision', 'fp32')}, p50: ONNX Loop "
              f"{lat['onnx']['p50_ms']:.2f} ms, step loop {lat['python']['p50_ms']:.2f} ms."]
    return "\n".join(lines) + "\n"


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    names, values = (["naive torch"], [r["naive_torch"]["words_per_s"]]) if "naive_torch" in r else ([], [])
    for mode in MODES:
        for label, key in (("(a) 1 word/req", "a_1word_c64"), ("(b) 16 words/req", "b_16words_c16"),
                           ("(c) stream", "c_stream")):
            names.append(f"{mode} {label}")
            values.append(r[mode][key]["words_per_s"])
    names += ["engine ceiling E"]
    values += [ceiling(r)[1]]
    ax1.barh(names, values, color="steelblue")
    ax1.set_xlabel("words / second")
    ax1.set_title("Throughput")
    for mode, color in (("request", "tab:blue"), ("continuous", "tab:orange")):
        ol = r[mode]["open_loop"]
        xs = [int(k.rstrip("%")) for k in ol]
        ax2.plot(xs, [v["p50_ms"] for v in ol.values()], "o-", color=color, label=f"{mode} p50")
        ax2.plot(xs, [v["p99_ms"] for v in ol.values()], "s--", color=color, label=f"{mode} p99")
        ax2.plot(xs, [v["in_process"]["p99_ms"] for v in ol.values()], "^:", color=color,
                 label=f"{mode} in-process p99")
    ax2.set_xlabel("offered load, % of (a)'s throughput")
    ax2.set_ylabel("latency, ms")
    ax2.set_title("Open loop (Poisson), 1 word per request")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(r: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = targets(r)
    r["targets"] = rows
    (out / "bench.json").write_text(json.dumps(r, indent=2) + "\n")
    (out / "bench.md").write_text(markdown(r, rows))
    plot(r, out / "bench.png")
    if "frontier" in r:
        from bench.frontier import plot as frontier_plot

        frontier_plot(r["frontier"], out / "frontier.png")
    print(markdown(r, rows))
