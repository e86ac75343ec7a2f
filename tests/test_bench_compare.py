"""bench/compare.py's statistics: the rank-sum permutation test and the verdicts of its table
(the benchmark runs themselves are exercised by running the script; docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "bench" / "compare.py"
_spec = importlib.util.spec_from_file_location("snakka_bench_compare", _PATH)
assert _spec and _spec.loader
compare = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = compare
_spec.loader.exec_module(compare)


def test_ranks_share_ties():
    assert compare._ranks([3.0, 1.0, 2.0, 2.0]) == [4.0, 1.0, 2.5, 2.5]


@pytest.mark.parametrize("a,b,p", [
    ([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], 2 / 252),   # complete separation, 5 a side
    ([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], 2 / 252),   # two-sided
    ([1, 2, 3], [4, 5, 6], 2 / 20),                  # 3 a side can never reach 0.01
    ([1, 1, 1], [1, 1, 1], 1.0),
    ([1, 3, 5, 7, 9], [2, 4, 6, 8, 10], 0.6905),
])
def test_rank_sum_p(a, b, p):
    assert compare.rank_sum_p([float(x) for x in a], [float(x) for x in b]) == pytest.approx(
        p, abs=1e-4)


def test_many_runs_sample_the_splits_and_never_give_p_zero(monkeypatch):
    monkeypatch.setattr(compare, "EXACT_PERMUTATIONS", 1000)  # C(24, 12) = 2,704,156 splits
    p = compare.rank_sum_p([float(x) for x in range(12)], [float(x) for x in range(12, 24)])
    assert p == pytest.approx(1 / 1001)
    p = compare.rank_sum_p([float(x) for x in range(0, 24, 2)], [float(x) for x in range(1, 24, 2)])
    assert p > 0.5


def _side(label: str, produce: list[float]) -> compare.Side:
    side = compare.Side(label, label, Path("."), label)
    side.runs = [{"scenario": "small", "acks": "1", "strict": False, "partitions": 1,
                  "records": 10, "record_bytes": 100, "produce_rec_s": v, "lat_p99_ms": v}
                 for v in produce]
    return side


def _verdicts(a: list[float], b: list[float]) -> dict[str, str]:
    return {r["metric"]: r["verdict"] for r in compare.summarize(_side("A", a), _side("B", b))}


def test_verdicts_follow_the_direction_of_each_number():
    # B's numbers all above A's: more records/s is better, a higher latency is worse.
    assert _verdicts([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == {
        "produce_rec_s": "better", "lat_p99_ms": "WORSE"}
    assert _verdicts([1, 3, 5, 7, 9], [2, 4, 6, 8, 10]) == {
        "produce_rec_s": "noise", "lat_p99_ms": "noise"}
    assert _verdicts([1, 2, 3], [7, 8, 9]) == {
        "produce_rec_s": "(too few runs)", "lat_p99_ms": "(too few runs)"}
