"""bench/report.py's targets: issue 69's rows (the engine against the machine's ceilings and the per-tensor
int8, the server beside MLServer in every round), met or not from the figures a `make bench` run records."""
from bench.report import PER_TENSOR, SHIPPED, targets

POINTS = ("c1", "c16", "c64", "REST c16")


def run(gemm: float, p50_ours: float, p50_old: float, matvec: float, rounds: list[tuple[float, float]]) -> dict:
    """A bench.json cut to what the targets read: rounds of (attnserve / MLServer calls/s, p99 ours / theirs)."""
    point = lambda calls, p99: {"calls_per_s": calls, "p99_ms": p99}  # noqa: E731
    return {
        "limits": {"precisions": {"int8": {
            "batch64": {"key": "int8/greedy-loop=onnx/batch=64", "words_per_s": 1000, "gflops": 80.0,
                        "fraction_of_gemm": gemm},
            "batch1": {"key": "int8/greedy-loop=onnx/batch=1", "words_per_s": 500, "gbs": 12.0,
                       "fraction_of_matvec_dram": matvec}}}},
        "frontier": {SHIPPED.format("int8"): {"batch1_p50_ms": p50_ours, "batch64_words_per_s": 2800},
                     PER_TENSOR: {"batch1_p50_ms": p50_old, "batch64_words_per_s": 3000}},
        "servers": {"rounds": [{"attnserve --workers 0": {p: point(100 * ratio, 10 * p99) for p in POINTS},
                                "MLServer": {p: point(100, 10) for p in POINTS}} for ratio, p99 in rounds]}}


def test_issue_69s_targets_are_met_or_not_by_their_figures():
    rows = {r["target"].split(".")[0]: r for r in targets(run(0.45, 0.60, 0.67, 0.80, [(3.5, 0.9), (2.5, 1.2)]))}
    assert list(rows) == ["8a", "8b", "8c", "9a", "9b", "9c", "9d", "9e"]
    assert rows["8a"]["met"] and rows["8a"]["ratio"] == 0.45
    assert rows["8b"]["met"] and rows["8b"]["ratio"] == round(0.67 / 0.60, 3)  # the per-tensor p50 over ours
    assert not rows["8c"]["met"]  # 80% of the matrix-vector ceiling, 85% asked
    assert rows["9a"]["met"] and rows["9b"]["met"]  # >= 2 in every round
    assert not rows["9c"]["met"] and rows["9c"]["ratio"] == 2.5  # >= 3: the worst round's 2.5 is not
    assert not rows["9e"]["met"]  # p99 1.2 x MLServer's in the second round
    assert rows["9e"]["detail"] == "each round: 1.11, 0.83"


def test_a_run_without_the_figures_has_no_rows_for_them():
    assert targets({}) == []
