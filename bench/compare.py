"""Before/after: the produce/consume benchmark for two git refs, in one run, on this machine.

    .venv/bin/python bench/compare.py main HEAD                      # 5 rounds, the full benchmark
    .venv/bin/python bench/compare.py main h10-lead --rounds 2 -- --quick
    .venv/bin/python bench/compare.py main . -- --scenarios small --acks all

``REF_A`` is "before", ``REF_B`` "after"; any git ref names a commit, and ``.`` is this working
tree as it is (uncommitted changes included). Arguments after ``--`` go to
``bench/bench_produce_consume.py`` unchanged (``--quick``, ``--scenarios``, ``--acks``,
``--strict``, ``--partitions``, ``--small-records`` ...); ``--startup-runs 0`` is added.

How it keeps the comparison fair:

- Each ref is exported (``git archive``) into a temporary directory and its C extensions
  (``src/snakka/**/_*.c``) are compiled there, so neither side falls back to the pure-Python
  record walker by accident; a probe checks that the broker imports snakka and its extensions
  from that directory, and the table says if an extension is missing on a side. Exporting
  instead of ``git worktree add`` leaves the repository's worktree list untouched even when the
  run is interrupted.
- Both sides run the SAME benchmark script (this checkout's bench/), with the same interpreter
  and client libraries; only the broker's source differs (``PYTHONPATH=<export>/src`` for the
  broker subprocess the benchmark starts).
- Runs are interleaved (``--rounds`` pairs, each run a fresh broker), the order alternating
  A B, B A, A B, ..., so a change in the machine's load hits both sides alike and a load that
  drifts during the run favours neither side. The load average before each run is recorded.
- The table shows each side's median and range, the change of the medians, and the p-value of
  an exact two-sided permutation test of the rank-sum (Mann-Whitney U) on the runs. A change is
  called "better" or "WORSE" only when p < ``ALPHA`` (0.01: the table tests some 36 numbers at
  once); that needs at least 5 runs a side (``--rounds 5``, the default), with fewer every
  row says "(too few runs)". ``compare.py main main`` shows what noise looks like here: two
  runs of the same code on this shared 2-core machine differ by 30-50 % when other work runs.

Output: one JSON object per line (``"type": "compare-run"`` per benchmark run with its ref and
round, then ``"type": "compare-summary"``; ``--json-out`` keeps them), then the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, round_order  # noqa: E402

BENCH = Path(__file__).resolve().parent / "bench_produce_consume.py"
RUN_TIMEOUT_S = 3600.0
BUILD_TIMEOUT_S = 600.0
# A change is "better"/"WORSE" when the permutation test's p-value is below this; 5 runs a
# side can reach it (complete separation: p = 2/252), 4 cannot (2/70).
ALPHA = 0.01
DEFAULT_ROUNDS = 5
# Up to this many relabellings the test enumerates them all; above, a fixed-seed sample.
EXACT_PERMUTATIONS = 200_000

# (JSON key, label, True when higher is better)
METRICS = (
    ("produce_rec_s", "produce rec/s", True),
    ("produce_mb_s", "produce MB/s", True),
    ("lat_p50_ms", "latency p50 ms", False),
    ("lat_p99_ms", "latency p99 ms", False),
    ("consume_rec_s", "consume rec/s", True),
    ("consume_mb_s", "consume MB/s", True),
    ("broker_peak_rss_mb", "broker peak RSS MB", False),
    ("produce_broker_cpu_s", "broker CPU s, produce", False),
    ("consume_broker_cpu_s", "broker CPU s, consume", False),
)

# Probe run in each side's environment: where snakka and its C extensions come from.
PROBE = """
import importlib.util, json, pathlib, snakka
exts = {}
for c in sorted(pathlib.Path(snakka.__file__).parent.rglob("_*.c")):
    name = ".".join(c.relative_to(pathlib.Path(snakka.__file__).parents[1]).with_suffix("").parts)
    spec = importlib.util.find_spec(name)
    exts[name] = spec.origin if spec else None
print(json.dumps({"snakka": snakka.__file__, "extensions": exts}))
"""

# Compiles every src/snakka/**/_*.c in place, as setup.py's optional extensions (-O2), without
# reading pyproject.toml (the venv's setuptools may be older than the build backend it names).
BUILD = """
import os, sys
from pathlib import Path
from setuptools import Distribution, Extension
from setuptools.command.build_ext import build_ext
root = Path(sys.argv[1])
os.chdir(root)
exts = [Extension(".".join(c.relative_to("src").with_suffix("").parts), [str(c)],
                  extra_compile_args=["-O2"])
        for c in sorted(Path("src").rglob("_*.c"))]
cmd = build_ext(Distribution({"name": "snakka-compare", "ext_modules": exts,
                              "package_dir": {"": "src"}}))
cmd.inplace = True
cmd.build_temp = str(root / "build" / "temp")
cmd.ensure_finalized()
cmd.run()
"""


@dataclass
class Side:
    """One ref under test: its source tree and the benchmark runs made on it."""

    label: str
    ref: str
    tree: Path
    commit: str
    extensions: dict[str, str | None] = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.tree / "src")  # replaces any caller's path to snakka
        return env


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def prepare(repo: Path, ref: str, label: str, workdir: Path) -> Side:
    """Export ``ref`` into ``workdir/label`` and build its C extensions (``.``: this tree)."""
    if ref == ".":
        dirty = " (with uncommitted changes)" if git(repo, "status", "--porcelain", "--",
                                                       "src") else ""
        side = Side(label, ref, repo, git(repo, "rev-parse", "--short", "HEAD") + dirty)
    else:
        commit = git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
        tree = workdir / label
        tree.mkdir()
        archive = subprocess.Popen(["git", "-C", str(repo), "archive", commit],
                                   stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {commit} failed")
        build = subprocess.run([sys.executable, "-c", BUILD, str(tree)], capture_output=True,
                               text=True, timeout=BUILD_TIMEOUT_S)
        if build.returncode != 0:
            print(f"[{label}] C extensions did not build (the pure-Python fallback runs):\n"
                  f"{build.stderr[-2000:]}", file=sys.stderr)
        side = Side(label, ref, tree, commit[:12])
    probe = subprocess.run([sys.executable, "-c", PROBE], env=side.env(), capture_output=True,
                           text=True, check=True, timeout=120)
    found = json.loads(probe.stdout)
    where = Path(found["snakka"]).resolve()
    if side.tree.resolve() not in where.parents:
        raise RuntimeError(f"[{label}] snakka is imported from {where}, not from {side.tree}")
    side.extensions = found["extensions"]
    return side


def run_bench(side: Side, bench_args: list[str], round_no: int, workdir: Path, out) -> None:
    json_out = workdir / f"{side.label}-{round_no}.jsonl"
    cmd = [sys.executable, str(BENCH), "--startup-runs", "0", "--json-out", str(json_out),
           *bench_args]
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=side.env(), cwd=workdir, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"[{side.label}] benchmark failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    for line in json_out.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") != "run":
            continue
        rec.update(type="compare-run", ref=side.ref, side=side.label, round=round_no,
                   load_avg_1m=round(load, 2))
        side.runs.append(rec)
        emit(rec, out)
    print(f"# round {round_no} {side.label} ({side.ref}): {time.monotonic() - t0:.0f} s, "
          f"load average {load:.1f}", file=sys.stderr, flush=True)


def _case(run: dict) -> tuple:
    return (run["scenario"], run["acks"], run["strict"], run["partitions"], run["records"],
            run["record_bytes"])


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_sum_p(va: list[float], vb: list[float]) -> float:
    """Two-sided p-value of the exact permutation test of A's rank sum (Mann-Whitney U):
    the share of the ways to split the pooled runs into groups of len(va) and len(vb) whose
    rank sum is at least as far from its mean as the observed one."""
    ranks = _ranks(va + vb)
    na, n = len(va), len(va) + len(vb)
    mean = na * (n + 1) / 2
    observed = abs(sum(ranks[:na]) - mean) - 1e-9
    sampled = math.comb(n, na) > EXACT_PERMUTATIONS
    if sampled:
        rng = random.Random(0)
        total = EXACT_PERMUTATIONS
        splits: Iterable[Sequence[int]] = (rng.sample(range(n), na) for _ in range(total))
    else:
        total = math.comb(n, na)
        splits = itertools.combinations(range(n), na)
    extreme = sum(1 for split in splits if abs(sum(ranks[i] for i in split) - mean) >= observed)
    if sampled:  # count the observed split too: a sampled p is never 0
        return (extreme + 1) / (total + 1)
    return extreme / total


def summarize(a: Side, b: Side) -> list[dict]:
    """Per case and metric: each side's median and range, the change, and a verdict."""
    rows = []
    cases = list(dict.fromkeys(_case(r) for r in a.runs + b.runs))
    for case in cases:
        ra = [r for r in a.runs if _case(r) == case]
        rb = [r for r in b.runs if _case(r) == case]
        for key, label, higher_better in METRICS:
            va = [r[key] for r in ra if key in r]
            vb = [r[key] for r in rb if key in r]
            if not va or not vb:
                continue
            ma, mb = statistics.median(va), statistics.median(vb)
            change = (mb - ma) / ma * 100 if ma else float("nan")
            p = rank_sum_p(va, vb)
            best_p = 2 / math.comb(len(va) + len(vb), len(va))  # complete separation
            if best_p >= ALPHA:
                verdict = "(too few runs)"
            elif p >= ALPHA or mb == ma:
                verdict = "noise"
            else:
                verdict = "better" if (mb > ma) == higher_better else "WORSE"
            rows.append({"type": "compare-summary", "scenario": case[0], "acks": case[1],
                         "strict": case[2], "partitions": case[3], "records": case[4],
                         "record_bytes": case[5], "metric": key, "label": label,
                         "a_median": round(ma, 3), "b_median": round(mb, 3),
                         "a_range": [min(va), max(va)],
                         "b_range": [min(vb), max(vb)], "runs": [len(va), len(vb)],
                         "change_pct": round(change, 1), "p": round(p, 4),
                         "verdict": verdict})
    return rows


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.2f}".rstrip("0").rstrip(".")


def print_table(a: Side, b: Side, rows: list[dict]) -> None:
    print()
    for side, name in ((a, "A"), (b, "B")):
        missing = [m for m, origin in side.extensions.items() if origin is None]
        ext = ("C extensions: " + ", ".join(sorted(side.extensions)) if not missing else
               "MISSING C extensions (pure-Python fallback): " + ", ".join(missing))
        print(f"{name} = {side.ref} ({side.commit}); {ext}")
    loads = [r["load_avg_1m"] for r in a.runs + b.runs]
    if loads:
        print(f"load average (1 min) before the runs: {min(loads):.1f}-{max(loads):.1f}")
    hdr = (f"{'case':<22} {'metric':<22} {'A median':>11} {'B median':>11} {'B vs A':>8}  "
           f"{'A range':<21} {'B range':<21} {'p':>6}  verdict")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        case = f"{r['scenario']} acks={r['acks']}{'+strict' if r['strict'] else ''}"
        ar = f"{_num(r['a_range'][0])}-{_num(r['a_range'][1])}"
        br = f"{_num(r['b_range'][0])}-{_num(r['b_range'][1])}"
        print(f"{case:<22} {r['label']:<22} {_num(r['a_median']):>11} {_num(r['b_median']):>11} "
              f"{r['change_pct']:>+7.1f}%  {ar:<21} {br:<21} {r['p']:>6.3f}  {r['verdict']}")
    print(f"\np: exact permutation test of the rank sums (two-sided); 'better'/'WORSE' when "
          f"p < {ALPHA}, 'noise' otherwise.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref_a", help="before: a git ref, or . for this working tree")
    ap.add_argument("ref_b", help="after: a git ref, or . for this working tree")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                    help=f"A/B pairs to run (default {DEFAULT_ROUNDS}; fewer than 5 give "
                         f"medians and ranges but no verdict)")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the git repository the refs are in (default: this checkout)")
    ap.add_argument("--json-out", type=Path, help="also append the JSON lines to this file")
    ap.add_argument("--keep", action="store_true", help="keep the exported trees (printed)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="snakka-compare-"))
    out = open(args.json_out, "a") if args.json_out else None
    try:
        a = prepare(args.repo, args.ref_a, "A", workdir)
        b = prepare(args.repo, args.ref_b, "B", workdir)
        for round_no in range(1, args.rounds + 1):
            for side in round_order((a, b), round_no):
                run_bench(side, bench_args, round_no, workdir, out)
        rows = summarize(a, b)
        for row in rows:
            emit(row, out)
        print_table(a, b, rows)
    finally:
        if out is not None:
            out.close()
        if args.keep:
            print(f"exported trees kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
