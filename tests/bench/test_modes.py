"""bench/modes.py: the calls each workload sends, and the table it writes from the figures."""
import struct

from attnserve.v1 import attnserve_pb2 as pb
from bench.modes import markdown, workloads


def read_calls(path) -> list:
    raw, calls, at = path.read_bytes(), [], 0
    while at < len(raw):
        (n,) = struct.unpack_from("<I", raw, at)
        calls.append(pb.TransduceRequest.FromString(raw[at + 4:at + 4 + n]))
        at += 4 + n
    return calls


def test_each_workload_sends_the_calls_its_name_says(tmp_path):
    words = [("x" * (1 + i % 14)) + str(i) for i in range(400)]
    loads = workloads(words, tmp_path)
    for name, gens in loads.items():
        for path, concurrency, per_call in gens:
            calls = read_calls(path)
            assert calls and {len(c.inputs) for c in calls} == {per_call}, name
            assert all(c.options.bypass_lexicon for c in calls), name
    assert [g[1:] for g in loads["1 word, c64"]] == [(64, 1)]
    beam = read_calls(loads["beam 5 n-best 5, 1 word, c16"][0][0])
    assert {(c.options.beam_size, c.options.n_best) for c in beam} == {(5, 5)}
    short, long_ = loads["mixed: short words c16 + 16 long words c4"]
    assert max(len(w) for c in read_calls(short[0]) for w in c.inputs) <= 5
    assert min(len(w) for c in read_calls(long_[0]) for w in c.inputs) >= 10 and long_[1:] == (4, 16)


def test_the_table_gives_medians_and_the_ratio_per_stream():
    def row(words_per_s):
        return {"words_per_s": words_per_s, "p50_ms": 1.0, "p99_ms": 2.0}
    r = {"seconds": 3, "rounds": 3, "load_average_start": (1.0,), "load_average_end": (2.0,),
         "models": {"models/m/1": {"w": {"request": [[row(100)], [row(300)], [row(200)]],
                                         "continuous": [[row(100)], [row(110)], [row(400)]]},
                                   "mixed": {"request": [[row(100), row(50)]], "continuous": [[row(200), row(25)]]}}}}
    lines = markdown(r).splitlines()
    assert "| m | w |  | 200 | 110 | 0.55 | 1.00 / 2.00 | 1.00 / 2.00 |" in lines
    assert any(l.startswith("| m | mixed | short | 100 | 200 | 2.00 |") for l in lines)
    assert any(l.startswith("| m | mixed | long | 50 | 25 | 0.50 |") for l in lines)
