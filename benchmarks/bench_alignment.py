"""The driver's collective matching and clock alignment on synthetic communication rows: seconds per step.

    python3 benchmarks/bench_alignment.py                 # 1024 and 10240 ranks, a 1024-rank chain
    PYTHONPATH=/path/to/other/checkout python3 benchmarks/bench_alignment.py   # the same at another commit

No traces: the rows are what the map step sends the driver (collectives.comm_frame of numpy columns), so a
step's time is the driver's own. Every rank takes part in 28 all-reduces of one group whose `Process Group
Ranks` text lists every rank (5 KB at 1024 ranks, 59 KB at 10240), its clock off by up to 2 ms, its ends
jittered by up to 500 ns, as in the scale benchmark's `flat` set. The chain: 1024 ranks, each pair of
neighbours in a group of its own with 50 all-reduces (pipeline stages), so the offsets pass from rank to
rank. Steps: `clock_alignment` (the check's clock skew), `match_extract` (`--by rank` and `--by
collective`), and the coding of the group-rank texts by pandas' factorize against io.codes.text_codes (where
this checkout has it). Each step runs three times; the best time is printed, with the largest error of the
estimated clock offsets against the planted ones (the ends' jitter allows up to 500 ns in one group; the
chain has none).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from traceattr import schema as S
from traceattr.analysis.collectives import ROW, clock_alignment, comm_frame, match_extract

COLLECTIVES = 28
STEP_NS = 1_000_000


def _shared(text: str, n: int) -> np.ndarray:
    """n references to one text (np.full makes a copy of the text per row)."""
    return np.array([text] * n, dtype=object)


def _columns(rank, group, group_ranks, seq, end_ns) -> dict[str, np.ndarray]:
    n = len(rank)
    texts = {name: _shared(value, n) for name, value in
             ((S.NAME, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"), (S.COLLECTIVE, "allreduce"))}
    return {S.RANK: rank, S.WINDOW: np.zeros(n, np.int64), S.DEVICE: rank % 8, S.STREAM: np.full(n, 20),
            S.PROCESS_GROUP: group, S.GROUP_RANKS: group_ranks, S.SEQ: seq,
            S.COMM_BYTES: np.full(n, 4 << 20), S.SRC_RANK: np.full(n, -1), S.DST_RANK: np.full(n, -1),
            S.GROUP_SIZE: np.full(n, -1),
            S.START_NS: end_ns - 100_000, S.END_NS: end_ns, S.CORRELATION: np.arange(n), ROW: np.arange(n),
            S.SELF_NS: np.full(n, 100_000), **texts}


def one_group(ranks: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(1)
    rank = np.repeat(np.arange(ranks), COLLECTIVES)
    seq = np.tile(np.arange(1, COLLECTIVES + 1), ranks)
    offset = rng.integers(0, 2_000_000, ranks)
    end = 10**15 + seq * STEP_NS + offset[rank] + rng.integers(0, 500, len(rank))
    text = str(list(range(ranks)))      # one object shared by every row, as the driver interns it
    return comm_frame(_columns(rank, _shared("0", len(rank)), _shared(text, len(rank)), seq, end)), offset


def chain(ranks: int, per_pair: int = 50) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(2)
    left = np.repeat(np.arange(ranks - 1), per_pair)
    seq = np.tile(np.arange(1, per_pair + 1), ranks - 1)
    rank = np.concatenate([left, left + 1])
    pair = np.concatenate([left, left])
    offset = rng.integers(-10**9, 10**9, ranks)
    end = 10**15 + np.concatenate([seq, seq]) * STEP_NS + offset[rank]
    names = np.array([str(p) for p in range(ranks - 1)], dtype=object)
    texts = np.array([str([p, p + 1]) for p in range(ranks - 1)], dtype=object)
    return comm_frame(_columns(rank, names[pair], texts[pair], np.concatenate([seq, seq]), end)), offset


def best(step, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    try:
        from traceattr.io.codes import text_codes
    except ImportError:
        text_codes = None
    print("| rows | ranks | clock_alignment s | largest offset error ns | match_extract s | factorize group texts s "
          "| text_codes s |")
    print("|---|---|---|---|---|---|---|")
    for label, (frame, planted), ranks in (("one group", one_group(1024), 1024), ("one group", one_group(10240), 10240),
                                           ("chain", chain(1024), 1024)):
        loaded = set(range(ranks))
        texts = frame[S.GROUP_RANKS].to_numpy(object)
        found = clock_alignment(frame).offset_ns
        error = max(abs(found.get(r, 0) - int(planted[r] - planted[0])) for r in range(ranks))
        cells = [f"{best(lambda: clock_alignment(frame)):.3f}", f"{error:,}",
                 f"{best(lambda: match_extract(frame, loaded, True)):.3f}", f"{best(lambda: pd.factorize(texts)):.3f}",
                 f"{best(lambda: text_codes(texts)):.3f}" if text_codes else "-"]
        print(f"| {len(frame):,} ({label}) | {ranks} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
