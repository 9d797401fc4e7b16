"""Per-file code tables (traceattr/io/codes.py) and the string columns rebuilt from them: values first seen
in late chunks, non-ASCII names, numeric-string pids, kernels classified by names seen anywhere in the file."""

from __future__ import annotations

import json
import subprocess
import sys
from operator import itemgetter

import numpy as np
import pyarrow as pa

import traceattr
from traceattr import schema as S
from traceattr.io.codes import Interner, RowIds, arrow_numbers, arrow_strings
from traceattr.io.decode import decode_file
from test_io_real import check_conservation


def test_interner_codes_are_stable_and_grow():
    names = Interner()
    first = names.codes(itemgetter(0), [("b",), ("a",), ("b",)])
    second = names.codes(itemgetter(0), [("a",), ("c",), ("b",)])
    assert first.dtype == np.int32
    assert [names.values[c] for c in first] == ["b", "a", "b"]
    assert [names.values[c] for c in second] == ["a", "c", "b"]
    assert sorted(names.values) == ["a", "b", "c"]          # each distinct value once


def test_row_ids_keep_numeric_strings_apart_from_ints():
    ids = RowIds()
    column = ids.column(itemgetter(0), [(12,), ("12",), ("Spans",), ("12",), (12,)])
    assert column[0] == column[4] == 12
    assert column[1] == column[3] < -1 and column[2] < -1 and column[1] != column[2]


def test_arrow_builders_match_pyarrow():
    values = ["", "aten::mm", "ncclKernel_AllReduce", "µs naïve 名前", "x" * 300]
    assert arrow_strings(values).equals(pa.array(values, pa.string()))
    assert arrow_strings([]).equals(pa.array([], pa.string()))
    numbers = np.array([-1, 0, 2**62], np.int64)
    assert arrow_numbers(numbers, pa.int64()).equals(pa.array(numbers, pa.int64()))
    assert arrow_numbers(np.array([3, 1], np.int64), pa.int32()).equals(pa.array([3, 1], pa.int32()))


def _trace(path, events):
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                                "baseTimeNanoseconds": 1_790_857_026_000_000_000}, indent=1))
    return path


def test_late_names_and_kernel_classes_across_chunks(tmp_path):
    # 400 events per name group so each group lands in other chunks with a 4 KB block size
    events = []
    for i in range(1200):
        group = i // 400
        name = ["gemm", "ncclDevKernel_AllReduce", "ядро_μ"][group]
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7 + group,
                       "ts": 1000.0 + i * 10, "dur": 5.5 if i % 2 else 7.25,
                       "args": {"correlation": i, "Collective name": "allreduce" if i == 1100 else ""}})
        events.append({"ph": "X", "cat": "cpu_op", "name": f"op_{group}", "pid": "Spans", "tid": "12",
                       "ts": 1000.0 + i * 10, "dur": 1, "args": {"External id": i}})
        events.append({"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": 1000.0 + i * 10, "cat": "ac2g", "name": "ac2g"})
    path = _trace(tmp_path / "late.pt.trace.json", events)
    decoded = decode_file(str(path), block_bytes=4096)
    device = decoded.device
    assert device.column(S.NAME).to_pylist() == [e["name"] for e in events if e["cat"] == "kernel"]
    expected = ["communication" if "nccl" in e["name"].lower() or e["args"]["Collective name"] else "compute"
                for e in events if e["cat"] == "kernel"]
    assert device.column(S.CATEGORY).to_pylist() == expected
    assert device.column(S.COLLECTIVE).to_pylist().count("allreduce") == 1
    host = decoded.host
    assert host.column(S.NAME).to_pylist() == [e["name"] for e in events if e["cat"] == "cpu_op"]
    pids, tids = set(host.column(S.PID).to_pylist()), set(host.column(S.TID).to_pylist())
    assert len(pids) == len(tids) == 1 and pids.isdisjoint({12}) and tids.isdisjoint({12})
    assert decoded.phases == {"X": 2400, "f": 1200}
    check_conservation(traceattr.load(path))


def test_decode_does_not_import_pandas(tmp_path):
    path = _trace(tmp_path / "small.pt.trace.json", [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.25}])
    code = ("import sys; from traceattr.io.decode import decode_file; "
            f"d = decode_file({str(path)!r}); print(d.device.num_rows, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False"]


def test_text_codes_and_shared_texts_agree_with_pandas_factorize():
    """text_codes gives pandas' factorize codes and uniques (None and NaN: -1); shared_texts makes equal
    texts one object and keeps what is not a text."""
    import pandas as pd

    from traceattr.io.codes import shared_texts, text_codes

    rng = np.random.default_rng(3)
    pool = ["", "[0, 1]", "x" * 5000, "[0, 1, 2]", None, float("nan"), "é\x00"]
    for _ in range(50):
        values = np.array([pool[i] for i in rng.integers(0, len(pool), int(rng.integers(0, 60)))], dtype=object)
        # equal texts as distinct objects, as a decode gives them
        values = np.array(["".join(list(v)) if isinstance(v, str) else v for v in values], dtype=object)
        for sort in (False, True):
            codes, texts = text_codes(values, sort=sort)
            want_codes, want_texts = pd.factorize(values, sort=sort)
            assert np.array_equal(codes, want_codes) and texts == list(want_texts)
        shared = shared_texts(values)
        assert [a == b or (a is None and b is None) or (a != a and b != b) for a, b in zip(shared, values)] == \
            [True] * len(values)
        firsts: dict = {}
        for value in shared:
            if isinstance(value, str):
                assert firsts.setdefault(value, value) is value     # one object per distinct text
