"""Real traffic: English words drawn by their frequency in running text, lexicon and cache on and off.

    python -m bench.realtraffic [--bundle models/g2p-en/1] [--duration-s 4]

Part of `make bench` (bench/run.py stores it as r["real_traffic"]); run alone it measures its own
engine ceiling E (bench/sweep.py's engine_sweep, shorter) and writes bench/results/realtraffic.{json,md}.

The workload: tokens drawn with replacement, by frequency, from wordfreq's top 50,000 English words
(the `wordfreq` package ships its lists: no network), keeping the words of the model's alphabet, with a
fixed seed. A TTS front end sends what people write, so nothing is filtered on the model's dev/test split;
the report says what share of tokens CMUdict (the bundle's lexicon) has and how many are distinct.

Four fresh servers of the bundle: lexicon and response cache on (the defaults), lexicon on and cache
off, lexicon off and cache on, both off. With the cache on, a server is first sent the stream's first
--warmup-tokens tokens once, in order (as real traffic fills a cache; not measured); with it off,
loadgen's own 1 s warm-up. Then the measured points, each on a later segment of the stream, new to the
server: (b) 16 words per request at concurrency 16 and (a) 1 word per request at 64, as in bench/run.py.
Hit rates are deltas of the server's /metrics over each measured run; an LRU fed the stream models them.
The cached word's unloaded p50 (one word again and again at concurrency 1, its first calls warming the
cache) is measured beside the echo RPC's (bench/echo.py), alternating rounds, the median of each side.

Targets: lexicon+cache (b) >= 10 x E words/s; cached word's unloaded p50 <= echo p50 + 0.3 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, OrderedDict
from importlib.metadata import version
from pathlib import Path

from bench.harness import BIN, Server, free_port, load, metric_samples, test_words
from bench.sweep import best, engine_sweep

TOP_N = 50_000
SEED = 1
SEGMENT_TOKENS = 400_000  # per measured point ((b), (a)): more than one sends, so none wraps
WARMUP_TOKENS = 100_000  # sent once before measuring with the cache on
CACHED_WORD = "the"
CONFIGS = (  # name, lexicon, cache, server flags
    ("lexicon+cache", True, True, []),
    ("lexicon, no cache", True, False, ["--cache-entries", "0"]),
    ("model+cache", False, True, ["--lexicon", "false"]),
    ("model only", False, False, ["--lexicon", "false", "--cache-entries", "0"]),
)
DEFAULT_CACHE_ENTRIES = 20000  # the server's --cache-entries default (service/config.py)
B_LOAD = {"concurrency": 16, "words_per_request": 16}
A_LOAD = {"concurrency": 64}
LEXICON_CACHE_X_E = 10.0
CACHED_P50_OVER_ECHO_MS = 0.3


def alphabet(manifest: dict) -> set[str]:
    """The model's input characters: its source vocabulary without the special tokens."""
    specials = {t for t in manifest["src_vocab"] if t.startswith("<") and t.endswith(">")}
    return {t for t in manifest["src_vocab"] if t not in specials}


def vocabulary(chars: set[str], top_n: int = TOP_N) -> tuple[list[str], list[float]]:
    """wordfreq's top_n English words written in `chars` (at least one letter), with their frequencies."""
    import wordfreq

    words = [w for w in wordfreq.top_n_list("en", top_n) if set(w) <= chars and re.search("[a-z]", w)]
    return words, [wordfreq.word_frequency(w, "en") for w in words]


def sample_tokens(words: list[str], weights: list[float], n: int, seed: int = SEED) -> list[str]:
    """n tokens drawn independently, with replacement, by weight: running text's word frequencies."""
    return random.Random(seed).choices(words, weights=weights, k=n)


def lexicon_words(bundle) -> set[str]:
    lex = bundle.manifest.lexicon.file if bundle.manifest.lexicon else None
    if not lex:
        return set()
    return {line.split("\t", 1)[0] for line in (bundle.path / lex).read_text(encoding="utf-8").splitlines() if line}


def heldout_words(bundle) -> set[str]:
    """The model's dev and test words (reported, never filtered on)."""
    from training.evaluate import load_splits

    splits = load_splits(bundle.manifest.data)
    return {"".join(pair.src) for split in ("dev", "test") for pair in splits[split]}


def stream_stats(tokens: list[str], lexicon: set[str], heldout: set[str]) -> dict:
    types = set(tokens)
    n = len(tokens)
    return {"tokens": n, "unique": len(types), "unique_fraction": len(types) / n,
            "lexicon_token_fraction": sum(t in lexicon for t in tokens) / n,
            "lexicon_type_fraction": sum(t in lexicon for t in types) / len(types),
            "dev_test_token_fraction": sum(t in heldout for t in tokens) / n,
            "unique_fraction_of_first": {str(k): len(set(tokens[:k])) / k for k in (10_000, 100_000) if k < n},
            "top10": [[w, k / n] for w, k in Counter(tokens).most_common(10)]}


def lru_hit_rate(tokens: list[str], entries: int, skip: int, upto: int | None = None) -> float:
    """An LRU of `entries` answers fed the stream: its hit rate over tokens[skip:upto]."""
    cache: OrderedDict[str, None] = OrderedDict()
    hits = 0
    tokens = tokens[:upto]
    for i, t in enumerate(tokens):
        if t in cache:
            cache.move_to_end(t)
            hits += i >= skip
        else:
            cache[t] = None
            if len(cache) > entries:
                cache.popitem(last=False)
    return hits / max(1, len(tokens) - skip)


def scrape(metrics_port: int) -> dict:
    """attnserve_cache_lookups_total by result and attnserve_answers_total by origin, summed over models."""
    out: dict[str, float] = {}
    for s in metric_samples(metrics_port):
        if s.name == "attnserve_cache_lookups_total":
            key = "cache_" + s.labels["result"]
        elif s.name == "attnserve_answers_total":
            key = "answers_" + s.labels["origin"]
        else:
            continue
        out[key] = out.get(key, 0.0) + s.value
    return out


def rates(before: dict, after: dict) -> dict:
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)}
    lookups = d.get("cache_hit", 0) + d.get("cache_miss", 0)
    answers = sum(v for k, v in d.items() if k.startswith("answers_"))
    return {"cache_lookups": int(lookups), "cache_hit_rate": d.get("cache_hit", 0) / lookups if lookups else None,
            "answers": int(answers),
            "answer_share": {k[len("answers_"):]: v / answers for k, v in sorted(d.items())
                             if k.startswith("answers_") and answers}}


def measured(server: Server, metrics_port: int, words_file: Path, seconds: float, segment: int, cache: bool,
             **kw) -> dict:
    """One load run, its /metrics deltas beside. With the cache on, no loadgen warm-up: it would send the
    segment's first words and then measure them again, as hits; the server was warmed before (send_once)."""
    before = scrape(metrics_port)
    x = load(server, str(words_file), seconds, **({"warmup_s": 0} if cache else {}), **kw)
    x.update(rates(before, scrape(metrics_port)))
    if cache:  # bench/harness.py's load() counts loadgen's 1 s warm-up in the seconds: here there was none
        x["server_cpu_util"] = round(x["server_cpu_util"] * (x["seconds"] + 1.0) / x["seconds"], 3)
    x["segment_tokens"], x["wrapped"] = segment, x["words"] > segment
    share = x["answer_share"]
    hit = x["cache_hit_rate"]
    print(f"    cache hit rate {hit if hit is None else round(hit, 3)}, "
          f"answers {({k: round(v, 3) for k, v in share.items()})}", flush=True)
    return x


def send_once(addr: str, tokens: list[str], per_request: int = 128, in_flight: int = 4) -> dict:
    """Every token sent once, in stream order, `per_request` to a call, `in_flight` calls at a time, with
    loadgen's options (the same cache keys); a refused call (admission: RESOURCE_EXHAUSTED) is sent again."""
    import asyncio

    import grpc

    from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as pbg

    refused = 0

    async def go():
        async with grpc.aio.insecure_channel(addr) as channel:
            stub = pbg.TransducerStub(channel)
            options = pb.DecodeOptions(return_attention=True)
            starts = iter(range(0, len(tokens), per_request))

            async def worker():
                nonlocal refused
                for i in starts:
                    while True:
                        try:
                            await stub.Transduce(pb.TransduceRequest(inputs=tokens[i:i + per_request],
                                                                     options=options), timeout=120)
                            break
                        except grpc.aio.AioRpcError as e:
                            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                                raise
                            refused += 1
                            await asyncio.sleep(0.05)
            await asyncio.gather(*(worker() for _ in range(in_flight)))

    t = time.perf_counter()
    asyncio.run(go())
    seconds = time.perf_counter() - t
    return {"tokens": len(tokens), "seconds": round(seconds, 3), "words_per_s": len(tokens) / seconds,
            "words_per_request": per_request, "in_flight": in_flight, "refused_and_resent": refused}


def unloaded_beside_echo(server: Server, one_word: Path, seconds: float, rounds: int = 4) -> dict:
    """The cached word's p50 at concurrency 1 and the echo RPC's, alternating, `rounds` each: the median
    of the rounds' percentiles (the machine is shared; a round can meet a busy moment)."""
    cached, echo_runs = [], []
    with Server([sys.executable, "-m", "bench.echo"], health=False) as echo:
        for _ in range(rounds):
            echo_runs.append(load(echo, str(one_word), seconds / rounds, mode="echo", concurrency=1))
            cached.append(load(server, str(one_word), seconds / rounds, concurrency=1))  # its 1 s warm-up: the cache
    med = lambda runs, k: statistics.median(x[k] for x in runs)  # noqa: E731
    return {"word": one_word.read_text().strip(), "rounds": rounds,
            "cached_p50_ms": med(cached, "p50_ms"), "cached_p99_ms": med(cached, "p99_ms"),
            "echo_p50_ms": med(echo_runs, "p50_ms"), "echo_p99_ms": med(echo_runs, "p99_ms"),
            "cached_runs": cached, "echo_runs": echo_runs}


def measure(bundle, duration_s: float, engine: dict, echo_unloaded: dict | None = None,
            with_a: bool = True, warmup_tokens: int = WARMUP_TOKENS) -> dict:
    """Every configuration against a fresh server; E from `engine` (bench/sweep.py's engine_sweep of this run)."""
    from service.engine.engine import served_precision

    e_key, E = best(engine, served_precision(bundle.manifest, "auto") + "/")  # the servers' precision
    d = duration_s
    chars = alphabet(bundle.manifest)
    words, weights = vocabulary(chars)
    points = ("b", "a") if with_a else ("b",)
    tokens = sample_tokens(words, weights, warmup_tokens + SEGMENT_TOKENS * len(points))
    segments = {"warmup": tokens[:warmup_tokens]}
    for i, name in enumerate(points):
        segments[name] = tokens[warmup_tokens + i * SEGMENT_TOKENS:warmup_tokens + (i + 1) * SEGMENT_TOKENS]
    lex, held = lexicon_words(bundle), heldout_words(bundle)
    n = DEFAULT_CACHE_ENTRIES
    r: dict = {"source": f"wordfreq {version('wordfreq')} top_n_list('en', {TOP_N}), weights word_frequency(w, 'en')",
               "vocabulary": {"words": len(words), "of_top_n": TOP_N, "alphabet": "".join(sorted(chars)),
                              "frequency_mass_kept": sum(weights)},
               "seed": SEED, "duration_s": d, "E": {"words_per_s": E, "key": e_key},
               "stream": stream_stats(tokens, lex, held),
               "lru_model": {"entries": n,
                             "after_warmup": lru_hit_rate(tokens, n, warmup_tokens, warmup_tokens + 100_000),
                             "steady": lru_hit_rate(tokens, n, warmup_tokens + SEGMENT_TOKENS)},
               "warmup_tokens": warmup_tokens,
               "warmup": f"cache on: the stream's first {warmup_tokens} tokens sent once, in order, before "
                         "measuring (not measured); cache off: loadgen's 1 s warm-up. Each measured point is "
                         "a later segment of the stream, new to the server",
               "configs": {}}
    st, lm = r["stream"], r["lru_model"]
    print(f"  stream: {st['tokens']} tokens, {st['unique']} distinct ({100 * st['unique_fraction']:.1f}%), "
          f"{100 * st['lexicon_token_fraction']:.1f}% CMUdict tokens; LRU-{n} model hit rate after the warm-up "
          f"{lm['after_warmup']:.3f}, steady {lm['steady']:.3f}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="attnserve-realtraffic-"))
    files = {}
    for name in points:  # in the order drawn (loadgen shuffles a file, seed 0: the draws stay i.i.d.)
        files[name] = tmp / f"{name}.txt"
        files[name].write_text("\n".join(segments[name]) + "\n")
    one_word = tmp / "one.txt"
    one_word.write_text(CACHED_WORD + "\n")
    base = [str(BIN / "attnserve-server"), "--model-dir", str(bundle.path), "--host", "127.0.0.1"]
    for name, lexicon, cache, flags in CONFIGS:
        print(f"  real traffic, {name} ({' '.join(flags) or 'defaults'})", flush=True)
        mport = free_port()
        with Server(base + ["--metrics-port", str(mport)] + flags) as s:
            c = r["configs"][name] = {"lexicon": lexicon, "cache": cache, "flags": flags}
            if cache:
                before = scrape(mport)
                c["warmup"] = send_once(s.addr, segments["warmup"])
                c["warmup"].update(rates(before, scrape(mport)))
                print(f"    warm-up: {c['warmup']['tokens']} tokens in {c['warmup']['seconds']:.1f} s, cache hit rate "
                      f"{c['warmup']['cache_hit_rate']:.3f}", flush=True)
            c["b_16words_c16"] = measured(s, mport, files["b"], d, SEGMENT_TOKENS, cache, **B_LOAD)
            if with_a:
                c["a_1word_c64"] = measured(s, mport, files["a"], d, SEGMENT_TOKENS, cache, **A_LOAD)
            if lexicon and cache:
                r["cached_word_unloaded"] = unloaded_beside_echo(s, one_word, d / 2)
    if echo_unloaded:
        r["cached_word_unloaded"]["run_echo_unloaded_p50_ms"] = echo_unloaded["p50_ms"]
    r["targets"] = targets(r)
    return r


def targets(rt: dict) -> list[dict]:
    E = rt["E"]["words_per_s"]
    b = rt["configs"]["lexicon+cache"]["b_16words_c16"]
    u = rt["cached_word_unloaded"]
    diff = u["cached_p50_ms"] - u["echo_p50_ms"]
    ref = (f"; bench's echo_unloaded of this run {u['run_echo_unloaded_p50_ms']:.2f} ms"
           if "run_echo_unloaded_p50_ms" in u else "")
    return [
        {"target": f"lexicon+cache (b) >= {LEXICON_CACHE_X_E:g} x E words/s", "value": b["words_per_s"] / E,
         "needed": f">= {LEXICON_CACHE_X_E:g}", "met": b["words_per_s"] / E >= LEXICON_CACHE_X_E,
         "detail": f"{b['words_per_s']:.0f} words/s / E {E:.0f} words/s ({rt['E']['key']})"},
        {"target": f"cached word's unloaded p50 <= echo p50 + {CACHED_P50_OVER_ECHO_MS} ms", "value": diff,
         "needed": f"<= {CACHED_P50_OVER_ECHO_MS} ms", "met": diff <= CACHED_P50_OVER_ECHO_MS,
         "detail": f"'{u['word']}' p50 {u['cached_p50_ms']:.3f} ms - echo p50 {u['echo_p50_ms']:.3f} ms "
                   f"(beside it, concurrency 1, medians of {u['rounds']} alternating rounds){ref}"},
    ]


def lines(rt: dict) -> list[str]:
    """The markdown section (bench/report.py and this module's own .md)."""
    st, v = rt["stream"], rt["vocabulary"]
    out = [f"Workload: {st['tokens']} tokens drawn by frequency (seed {rt['seed']}) from {rt['source']}: "
           f"{v['words']} of the top {v['of_top_n']} words are in the model's alphabet (`{v['alphabet']}`), "
           f"{100 * v['frequency_mass_kept']:.1f}% of English token mass. {st['unique']} distinct "
           f"({100 * st['unique_fraction']:.2f}% of tokens; of the first 10,000 / 100,000 tokens: "
           f"{' / '.join(f'{100 * f:.1f}%' for f in st['unique_fraction_of_first'].values())}); "
           f"{100 * st['lexicon_token_fraction']:.1f}% of tokens "
           f"({100 * st['lexicon_type_fraction']:.1f}% of distinct words) are CMUdict (lexicon) words; "
           f"{100 * st['dev_test_token_fraction']:.1f}% of tokens are the model's dev/test words (not filtered: "
           f"users send them). Most frequent: {', '.join(f'{w} {100 * f:.1f}%' for w, f in st['top10'])}.",
           "",
           f"Warm-up: {rt['warmup']}. An LRU of {rt['lru_model']['entries']} entries fed this stream in order "
           f"hits {100 * rt['lru_model']['after_warmup']:.1f}% of the 100,000 tokens after the warm-up and "
           f"{100 * rt['lru_model']['steady']:.1f}% in its steady state (a model for the measured hit rates).",
           "", "| target | value | needed | met | measured |", "|---|---|---|---|---|"]
    out += [f"| {t['target']} | {t['value']:.3f} | {t['needed']} | {'met' if t['met'] else '**not met**'} | "
            f"{t['detail']} |" for t in rt["targets"]]
    out += ["", "| configuration | load | words/s | x E | p50 ms | p99 ms | errors | cache hit rate | "
            "lexicon answers | model answers | server CPU |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    E = rt["E"]["words_per_s"]
    for name, c in rt["configs"].items():
        if "warmup" in c:
            w = c["warmup"]
            out.append(f"| {name} | warm-up: {w['tokens']} tokens once, {w['words_per_request']}/req, "
                       f"{w['in_flight']} in flight (not measured) | {w['words_per_s']:.0f} | "
                       f"{w['words_per_s'] / E:.2f} | - | - | {w['refused_and_resent']} refused, resent | "
                       f"{100 * w['cache_hit_rate']:.1f}% | {100 * w['answer_share'].get('LEXICON', 0):.1f}% | "
                       f"{100 * w['answer_share'].get('MODEL', 0):.1f}% | - |")
        for key, label in (("b_16words_c16", "(b) 16 words/req, c16"), ("a_1word_c64", "(a) 1 word/req, c64")):
            if key not in c:
                continue
            x = c[key]
            hr = "-" if x["cache_hit_rate"] is None else f"{100 * x['cache_hit_rate']:.1f}%"
            out.append(f"| {name} | {label}{' (wrapped)' if x['wrapped'] else ''} | {x['words_per_s']:.0f} | "
                       f"{x['words_per_s'] / E:.2f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x['errors']} | {hr} | "
                       f"{100 * x['answer_share'].get('LEXICON', 0):.1f}% | "
                       f"{100 * x['answer_share'].get('MODEL', 0):.1f}% | "
                       f"{x['server_cpu_util']:.2f} |")
    u = rt["cached_word_unloaded"]
    rounds = {k: ", ".join(f"{x['p50_ms']:.3f}" for x in u[k]) for k in ("cached_runs", "echo_runs")}
    out += ["", f"Unloaded, concurrency 1, medians of {u['rounds']} alternating rounds: '{u['word']}' from the cache "
            f"p50 {u['cached_p50_ms']:.3f} ms "
            f"(p99 {u['cached_p99_ms']:.3f}), echo RPC p50 {u['echo_p50_ms']:.3f} ms (p99 {u['echo_p99_ms']:.3f}); "
            f"p50 by round: cached {rounds['cached_runs']}, echo {rounds['echo_runs']} ms."]
    return out


def markdown(rt: dict, note: str = "") -> str:
    head = [f"# attnserve real traffic ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", ""]
    if note:
        head += [note, ""]
    return "\n".join(head + lines(rt)) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", default="models/g2p-en/1")
    p.add_argument("--duration-s", type=float, default=4.0, help="per measured point")
    p.add_argument("--engine-s", type=float, default=2.0, help="per point of the engine sweep that gives E")
    p.add_argument("--no-a", action="store_true", help="only the (b) load point")
    p.add_argument("--warmup-tokens", type=int, default=WARMUP_TOKENS, help="sent once before measuring, cache on")
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    from service.engine.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    print("engine (in-process onnxruntime, no server): E", flush=True)
    engine = engine_sweep(bundle, test_words(bundle), seconds=args.engine_s)
    rt = measure(bundle, args.duration_s, engine, with_a=not args.no_a, warmup_tokens=args.warmup_tokens)
    rt["engine"] = engine
    rt["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                     "loadavg_at_end": os.getloadavg()}
    note = (f"Run alone (python -m bench.realtraffic), {rt['machine']['cpus']} CPUs, {args.duration_s} s per point; "
            f"E from an engine sweep of {args.engine_s} s per point in the same run. Client and server share "
            "the cores.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "realtraffic.json").write_text(json.dumps(rt, indent=2) + "\n")
    md = markdown(rt, note)
    (out / "realtraffic.md").write_text(md)
    print(json.dumps(rt["targets"], indent=2))
    print(md)


if __name__ == "__main__":
    main()
