"""An adversarial check of traceattr's numbers against an independent plain-Python reference.

`tests/reference.py` recomputes, from the JSON alone (stdlib json with Decimal, Fractions, no numpy, no
traceattr), each (rank, device)'s busy time, Σ duration, counts and exact fair-share self time per kernel
name. The `traceattr summarize` CLI runs as a real subprocess on real traces and on small adversarial files
(`tests/reference_traces.py`), each exercising one fact of docs/kineto-format.md, and must agree:
busy exactly, Σ self == busy exactly, duration and count exactly, each name's self within (its count) ns of
the exact Fraction, and the op / step / module tables summing to busy exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import shared_trace, trace_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import reference  # noqa: E402
from reference_traces import (ERA_C_BASE_NS, EPOCH_NS, Raw, TraceBuilder, float_trap_tokens,  # noqa: E402
                              metadata_rows)

ATTRIBUTION_TABLES = ("op", "step", "module")


# -- running the CLI ---------------------------------------------------------------------------------
# One subprocess runs the real click command once per (path, table): exactly what `traceattr summarize PATH
# --format json --no-cache --by T` runs, with the ~0.5 s of imports paid once for all files instead of once
# per run (test_driver_equals_console_script checks that the two print the same rows).
TABLES = ("kernel", "rank") + ATTRIBUTION_TABLES
_DRIVER = """
import json, sys
from traceattr.cli import main
out = sys.argv[1]
for index, path in enumerate(sys.argv[2:]):
    for table in %r:
        target = f"{out}/{index}.{table}.json"
        try:
            code = main(["summarize", path, "--format", "json", "--no-cache", "-q", "--jobs", "1",
                         "--by", table, "--per-rank", "-o", target], standalone_mode=False)
        except Exception as exc:
            code = f"{type(exc).__name__}: {exc}"
        if code:
            open(target, "w").write(json.dumps({"error": code}))
""" % (TABLES,)


def run_summaries(paths: list[Path], out: Path) -> list[dict[str, list[dict] | dict]]:
    """Per path: table -> the JSON rows of `traceattr summarize PATH --format json --no-cache --by table`
    (or {"error": exit code or exception} when it failed)."""
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", _DRIVER, str(out), *map(str, paths)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [{table: json.loads((out / f"{index}.{table}.json").read_text()) for table in TABLES}
            for index in range(len(paths))]


def reference_paths(path: Path) -> list[Path]:
    return trace_files(path)


def check_against_reference(path: Path, tables: dict) -> dict:
    """Every agreement the brief asks for, between the CLI's `tables` for `path` and the reference."""
    for table, rows in tables.items():
        assert not isinstance(rows, dict), f"traceattr summarize {path} --by {table} failed: {rows['error']}"
    ref = reference(reference_paths(path))

    # kernel table, summed per (rank, device, name) in case a name shows under two categories
    count, duration, self_ns = defaultdict(int), defaultdict(int), defaultdict(int)
    self_per_device = defaultdict(int)
    kernel_rows = tables["kernel"]
    if kernel_rows and "name" not in kernel_rows[0]:      # no device activity: summarize shows host ops instead
        assert not any(r.count for r in ref.values()), f"{path}: host ops shown though the trace has kernels"
        kernel_rows = []
    for row in kernel_rows:
        key = (row["rank"], row["device"], row["name"])
        count[key] += row["count"]
        duration[key] += row["duration_ns"]
        self_ns[key] += row["self_ns"]
        self_per_device[key[:2]] += row["self_ns"]
    expected_keys = {(rank, device, name) for (rank, device), r in ref.items() for name in r.count}
    assert set(count) == expected_keys, f"{path}: kernel rows differ from the reference"
    for (rank, device), r in ref.items():
        for name in r.count:
            key = (rank, device, name)
            assert count[key] == r.count[name], f"{path}: count of {key}"
            assert duration[key] == r.duration_by_name[name], f"{path}: duration_ns of {key}"
            exact = r.self_by_name.get(name, 0)
            assert abs(self_ns[key] - exact) <= r.count[name], \
                f"{path}: self_ns of {key} is {self_ns[key]}, exact {float(exact)}"
        # the conservation law, against an independently computed busy time
        assert self_per_device[(rank, device)] == r.busy_ns, f"{path}: Σ self != busy on {(rank, device)}"

    # CPU-only ranks get one host row (device -1) with no device time; nothing else may appear
    rank_rows = {(row["rank"], row["device"]): row for row in tables["rank"]}
    for key in [key for key in rank_rows if key[1] == -1 and key not in ref]:
        assert (rank_rows[key]["busy_ns"], rank_rows[key]["activities"]) == (0, 0), f"{path}: {key}"
        del rank_rows[key]
    assert set(rank_rows) == set(ref), f"{path}: devices {sorted(rank_rows)} != reference {sorted(ref)}"
    for key, r in ref.items():
        assert rank_rows[key]["busy_ns"] == r.busy_ns, f"{path}: busy_ns of {key}"
        assert rank_rows[key]["overlap_ns"] == r.duration_ns - r.busy_ns, f"{path}: overlap_ns of {key}"
        assert rank_rows[key]["activities"] == r.activities, f"{path}: activities of {key}"

    for table in ATTRIBUTION_TABLES:
        sums = defaultdict(int)
        for row in tables[table]:
            if row["device"] != -1:         # device -1: host self time on CPU-only traces, not device time
                sums[(row["rank"], row["device"])] += row["self_ns"]
        assert dict(sums) == {key: r.busy_ns for key, r in ref.items()}, f"{path}: --by {table} != busy"
    return ref


# -- real traces -------------------------------------------------------------------------------------
REAL = [
    "trace_filter",                       # era A, two ranks, float dur with int ts, 3 streams
    "nccl_parser_config",                 # era C, base after traceEvents, gpu_user_annotation
    "amd_trace",                          # era C, ROCm, hex-string streams, no rank anywhere
    "ns_resolution_trace",                # era B, 19-digit decimal timestamps
    "critical_path/alexnet",              # era A, cuda_sync on the kernel rows
    "critical_path/simple_add",
    "torch213_cpu/single_json",           # no device events at all
    "torch213_cpu/single_gz",             # two windows of one process
    "torch213_cpu/dist2",                 # two gloo ranks
    "trace_diff/control",                 # 35 MB each: 3- and 4-way concurrency
    "trace_diff/test",
]


@pytest.fixture(scope="module")
def real_results(shared_traces, tmp_path_factory) -> dict[str, dict]:
    """The CLI's tables for every real trace folder, from one driver run."""
    present = [relative for relative in REAL if (shared_traces / relative).exists()]
    tables = run_summaries([shared_traces / relative for relative in present], tmp_path_factory.mktemp("real"))
    return dict(zip(present, tables))


# shared/traces/README.md's exact values (device pid, Σ duration, busy), computed there independently
README_VALUES = {
    "trace_filter/sampled_rank-0.json.gz": (0, 607_844_000, 547_656_000),
    "nccl_parser_config/nccl_data.json.gz": (0, 165_185_838, 157_500_014),
    "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": (2, 149_042, 149_042),
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (0, 472_454_441, 472_454_441),
    "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": (0, 66_203_000, 66_141_000),
}


@pytest.mark.parametrize("relative", sorted(README_VALUES))
def test_reference_reproduces_readme_values(relative):
    """The reference itself agrees with the exact values published beside the traces."""
    (key, r), = reference([shared_trace(relative)]).items()
    assert (key[1], r.duration_ns, r.busy_ns) == README_VALUES[relative]
    assert sum(r.self_by_name.values()) == r.busy_ns


@pytest.mark.parametrize("relative", REAL)
def test_real_trace_matches_reference(relative, real_results):
    path = shared_trace(relative)
    ref = check_against_reference(path, real_results[relative])
    if relative.startswith("torch213_cpu"):
        assert ref == {}                  # CPU-only: no device, and the CLI must say so by having no rows


# -- adversarial files -------------------------------------------------------------------------------
A0 = 1695835542514261000                  # an era-A epoch time (whole µs), in ns
C0 = ERA_C_BASE_NS + 4458676983543183     # an era-C time, in ns


def overlap_mix(b: TraceBuilder, t0: int, unit: int = 1000) -> TraceBuilder:
    """Three streams with partial, nested and identical overlaps, and a gap (whole µs when unit=1000)."""
    u = unit
    b.activity("gemm", t0, 40 * u, stream=7)
    b.activity("gemm", t0 + 45 * u, 10 * u, stream=7)
    b.activity("nccl_allreduce", t0 + 10 * u, 50 * u, stream=20)
    b.activity("copy", t0 + 20 * u, 7 * u, stream=21, cat="gpu_memcpy")
    b.activity("copy", t0 + 100 * u, 3 * u, stream=21, cat="gpu_memcpy")
    return b


def case_era_c_float_traps(tmp):
    b = TraceBuilder("C", display_unit="ms")
    traps = float_trap_tokens(8)
    for i in range(4):          # trap starts and trap-like durations on two overlapping streams
        b.activity("trap_a", Raw(traps[i]), Raw(f"{3 + i}.{(int(traps[i + 4][-3:]) or 1):03d}"), stream=7)
        b.activity("trap_b", Raw(traps[i + 4]), Raw("1.001"), stream=9)
    b.activity("int_token", C0 - ERA_C_BASE_NS and Raw(str((C0 - ERA_C_BASE_NS) // 1000)), Raw("5"), stream=7)
    b.activity("short_token", Raw(f"{(C0 - ERA_C_BASE_NS) // 1000 + 2}.5"), Raw("0.25"), stream=9)
    return b.write(tmp / "rank0.json")


def case_era_c_base_after_events(tmp):
    return overlap_mix(TraceBuilder("C", display_unit="ms", base_after=True), C0, 1001).write(tmp / "rank0.json")


def case_era_b_19_digits(tmp):
    b = overlap_mix(TraceBuilder("B", display_unit="ns"), EPOCH_NS, 1013)
    b.activity("sub_us", EPOCH_NS + 200_111, 333, stream=7).activity("sub_us", EPOCH_NS + 200_222, 333, stream=20)
    b.activity("negative", EPOCH_NS + 20_017, Raw("-0.500"), stream=22)     # clamped on the decimal path
    return b.write(tmp / "rank-0.Apr_03_18_51_38.1102.pt.trace.json")


def case_era_b_no_display_unit_small_fractions(tmp):
    # fractions below .125 vanish in float64 at 1.7e15 µs; durations are whole µs ("10.000")
    b = TraceBuilder("B")
    for i, frac in enumerate((47, 5, 0, 99)):  # the overlap of k and k2 depends on their fractions
        b.activity("k", EPOCH_NS - 47 + i * 20_000 + frac, 10_000, stream=7)
        b.activity("k2", EPOCH_NS - 47 + i * 20_000 + 124 + 5_000, 10_000, stream=8)
    return b.write(tmp / "rank0.json")


def case_era_a_float_dur(tmp):
    b = TraceBuilder("A")
    b.activity("k", A0, Raw("68.0"), stream=7).activity("k", A0 + 30_000, Raw("68.0"), stream=25)
    b.activity("m", A0 + 200_000, Raw("1.0"), cat="gpu_memset", stream=7)
    return b.write(tmp / "rank0.json")


def case_negative_dur(tmp):
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0)
    b.activity("negative", C0 + 5_000, Raw("-3.250"), stream=22)
    b.activity("negative", C0 + 500_000, Raw("-1"), stream=7)
    return b.write(tmp / "rank0.json")


def case_zero_length(tmp):
    b = overlap_mix(TraceBuilder("A"), A0)
    b.activity("zero", A0 + 20_000, 0, stream=22)      # inside three-way overlap
    b.activity("zero", A0 + 40_000, 0, stream=23)      # exactly at a boundary
    b.activity("zero", A0 + 900_000, 0, stream=7)      # alone, in the idle gap
    b.activity("zero_memcpy", A0 + 60_000, 0, stream=21, cat="gpu_memcpy",
               args={"memory bandwidth (GB/s)": "N/A", "bytes": 0})
    return b.write(tmp / "rank0.json")


def case_identical_on_two_streams(tmp):
    b = TraceBuilder("C", display_unit="ms")
    for stream in (7, 13, 14):
        b.activity(f"same_{stream}", C0, 10_001, stream=stream)   # 10001 / 3 is not whole
    b.activity("same_7", C0 + 10_001, 1, stream=7)
    return b.write(tmp / "rank0.json")


def case_nested_other_stream(tmp):
    b = TraceBuilder("B", display_unit="ns")
    b.activity("outer", EPOCH_NS, 100_007, stream=7)
    for i in range(5):
        b.activity("inner", EPOCH_NS + 3 + 17_011 * i, 9_001, stream=20)
    b.activity("inner_inner", EPOCH_NS + 4, 5, stream=21)
    return b.write(tmp / "rank0.json")


def case_same_stream_overlap(tmp):
    b = TraceBuilder("A")   # era-A rounding: back-to-back kernels overlap by 1 µs on one stream
    for i in range(6):
        b.activity("b2b", A0 + i * 9_000, 10_000, stream=7)
    return b.write(tmp / "rank0.json")


def case_gpu_user_annotation(tmp):
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0)
    for cat in ("gpu_user_annotation", "gpu_user_Annotation"):
        b.add({"ph": "X", "cat": cat, "name": "## forward ##", "pid": 0, "tid": 7,
               "ts": b.token(C0 - 1), "dur": b.token(2_000_002, duration=True), "args": {"External id": 1}})
        b.add({"ph": "X", "cat": cat, "name": "ProfilerStep#1", "pid": 0, "tid": 20,   # over the idle gap
               "ts": b.token(C0 + 300_000), "dur": b.token(50_000, duration=True), "args": {}})
    return b.write(tmp / "rank0.json")


def case_cuda_sync_and_event_rows(tmp):
    b = overlap_mix(TraceBuilder("A"), A0)
    for name, tid, start, dur in (("Stream Sync", 7, A0 + 5_000, 30_000), ("Context Sync", -1, A0, 500_000),
                                  ("Stream Wait Event", 20, A0 + 300_000, 4_000),
                                  ("Stream Sync", 1_000_007, A0 + 700_000, 2_000)):
        b.add({"ph": "X", "cat": "cuda_sync", "name": name, "pid": 0, "tid": tid, "ts": b.token(start),
               "dur": b.token(dur, duration=True), "args": {"cuda_sync_kind": name, "stream": tid}})
    b.add({"ph": "X", "cat": "cuda_event", "name": "Event Record", "pid": 0, "tid": 7,
           "ts": b.token(A0 + 800_000), "dur": b.token(1_000, duration=True), "args": {}})
    return b.write(tmp / "rank0.json")


def case_legacy_categories(tmp):
    b = TraceBuilder("A", legacy=True)   # the 2020 writer: Operator / Runtime / Kernel / Memcpy / Memset
    b.activity("kernel", A0, 10_000, cat="Kernel").activity("k2", A0 + 5_000, 10_000, cat="Kernel", stream=8)
    b.activity("Memcpy HtoD", A0 + 20_000, 4_000, cat="Memcpy").activity("Memset", A0 + 21_000, 1_000,
                                                                          cat="Memset", stream=9)
    b.activity("upper", A0 + 40_000, 1_000, cat="GPU_MEMCPY")
    return b.write(tmp / "rank0.json")


def case_string_pids_and_markers(tmp):
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0, 999)
    ts = b.token(C0)
    b.head_m = metadata_rows([0, 4242, "Spans"], ts)
    b.tail_m = metadata_rows([0, 4242, "Spans"], ts) + [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": b.token(C0 - 10_000_000), "dur": b.token(20_000_000, duration=True), "args": {"Op count": 0}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": b.token(C0 - 10_000_000)},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": b.token(C0 + 10_000_000)},
        {"ph": "X", "cat": "overhead", "name": "CUPTI Overhead", "pid": -1, "tid": 0, "ts": ts,
         "dur": b.token(1000, duration=True)}]
    return b.write(tmp / "rank0.json", layout="keyline")


def case_unmatched_flows(tmp):
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0)
    b.add({"ph": "f", "id": 99999, "pid": 0, "tid": 7, "ts": b.token(C0), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    b.add({"ph": "s", "id": 88888, "pid": 4242, "tid": 4242, "ts": b.token(C0 - 3_000_000), "cat": "ac2g",
           "name": "ac2g"})
    b.add({"ph": "f", "id": 7, "pid": 4242, "tid": 4242, "ts": b.token(C0 - 3_000_000), "cat": "fwdbwd",
           "name": "fwdbwd", "bp": "e"})
    b.add({"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": b.token(C0), "cat": "async_cpu_to_gpu",
           "name": "async_gpu"})
    return b.write(tmp / "rank0.json")


def case_huge_int_args(tmp):
    b = TraceBuilder("C", display_unit="ms")
    huge = {"Comms Id": 2**64 + 12345, "Seq": 2**70, "In msg nelems": 10**30}
    b.activity("ncclDevKernel_AllReduce", C0, 50_000, stream=40, args={**huge, "Collective name": "allreduce"})
    b.activity("gemm", C0 + 10_000, 5_000, stream=7)
    b.add({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 4242, "tid": 4243,
           "ts": b.token(C0 - 5_000_000), "dur": b.token(1_000, duration=True), "args": huge})
    return b.write(tmp / "rank0.json")


def case_inf_occupancy_and_na(tmp):
    b = TraceBuilder("A")
    b.activity("k", A0, 10_000, args={"blocks per SM": "inf", "warps per SM": "inf",
                                      "est. achieved occupancy %": 0, "grid": [0, 1, 1]})
    b.activity("c", A0 + 2_000, 3_000, stream=8, cat="gpu_memcpy",
               args={"memory bandwidth (GB/s)": "N/A", "bytes": 4})
    b.activity("c", A0 + 4_000, 3_000, stream=9, cat="gpu_memcpy", args={"memory bandwidth (GB/s)": 12})
    return b.write(tmp / "rank0.json")


def case_hex_streams(tmp):
    b = TraceBuilder("C", display_unit="ms")   # ROCm: `stream` as a hex string in args
    b.activity("hip_k", C0, 7_003, stream=0, args={"stream": "0x0", "kind": "Dispatch Kernel"})
    b.activity("hip_copy", C0 + 1_000, 2_000, stream=0, cat="gpu_memcpy", args={"stream": "0x1a", "kind": "HtoD"})
    b.add({"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyWithStream", "pid": 4242, "tid": 4242,
           "ts": b.token(C0 - 2_000_000), "dur": b.token(10, duration=True),
           "args": {"stream": "0x0", "kind": "HtoD", "cid": 3, "size": "4"}})
    return b.write(tmp / "mi250_trace.json")


def case_two_devices_one_file(tmp):
    b = overlap_mix(TraceBuilder("A", distributed_rank=3), A0)
    for i in range(3):
        b.activity("gemm", A0 + i * 7_000, 10_000, pid=1, stream=7 + i)   # same names, other device
    b.activity("only_dev2", A0, 1_000, pid=2)
    return b.write(tmp / "trace.json")


def case_two_windows_one_rank(tmp):
    folder = tmp / "windows"
    folder.mkdir()
    overlap_mix(TraceBuilder("C", display_unit="ms"), C0).write(folder / "host_1.1795988176232027336.pt.trace.json")
    later = overlap_mix(TraceBuilder("C", display_unit="ms"), C0 + 60_000_000_000, 1007)
    later.activity("gemm", C0 + 60_000_010_000, 33_333, stream=22)
    later.write(folder / "host_1.1795988176359184515.pt.trace.json.gz", compress=True)
    return folder


def case_layout_eventline(tmp):
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0, 1003)
    b.head_m = metadata_rows([0, 4242], b.token(C0))
    b.tail_m = metadata_rows([0, 4242], b.token(C0))
    return b.write(tmp / "rank0.json", layout="eventline")


def case_layout_keyline(tmp):
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0, 1003)
    b.head_m = metadata_rows([0, 4242], b.token(C0))
    b.tail_m = metadata_rows([0, 4242], b.token(C0))
    return b.write(tmp / "rank0.json", layout="keyline")


def case_gzip_with_json_name(tmp):
    return overlap_mix(TraceBuilder("A"), A0).write(tmp / "rank0.json", compress=True)


def case_era_c_negative_relative_ts(tmp):
    b = TraceBuilder("C", display_unit="ms")   # the writer can put relative `ts` a few ns below zero
    b.activity("early", ERA_C_BASE_NS - 3, 10, stream=7).activity("early", ERA_C_BASE_NS - 1, 10, stream=8)
    b.activity("later", ERA_C_BASE_NS + 5, 1_000, stream=7)
    return b.write(tmp / "rank0.json")


def case_many_thirds(tmp):
    b = TraceBuilder("C", display_unit="ms")   # 1 ns segments shared three ways: rounding must still add up
    for i in range(40):
        for stream, name in ((7, "a"), (8, "b"), (9, "c")):
            b.activity(name, C0 + 3 * i, 1 + (i % 2) * (stream - 6), stream=stream)
    return b.write(tmp / "rank0.json")


def case_relative_without_base(tmp):
    b = TraceBuilder("C", display_unit="ms")
    b.base_ns = 0                                # nightlies between the switch to relative time and #928
    overlap_mix(b, 4458676983543183, 1003)
    doc_path = b.write(tmp / "rank0.json")
    text = doc_path.read_text().replace('"baseTimeNanoseconds":0,', "")
    doc_path.write_text(text)
    return doc_path


CASES = {name[len("case_"):]: fn for name, fn in dict(globals()).items() if name.startswith("case_")}
# Fixed bugs stay listed here as regression cases (the reference found them; see git log):
# era_b_no_display_unit_small_fractions - era B was detected from float64 ts only, whose spacing at 1.7e15 us
# is 0.25 us, so a file without displayTimeUnit with every fraction below .125 us loaded as era A.
KNOWN_BUGS: dict[str, str] = {}


@pytest.fixture(scope="module")
def adversarial_results(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Every adversarial case written to its own folder, and the CLI's tables for it (one driver run)."""
    paths = {}
    for case, write in CASES.items():
        paths[case] = write(tmp_path_factory.mktemp(case))
    tables = run_summaries(list(paths.values()), tmp_path_factory.mktemp("adversarial_out"))
    return {case: (path, table) for (case, path), table in zip(paths.items(), tables)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_trace_matches_reference(case, adversarial_results, request):
    if case in KNOWN_BUGS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[case]))
    path, tables = adversarial_results[case]
    ref = check_against_reference(path, tables)
    assert ref, f"{case}: the adversarial file holds device activities"


def test_reference_sees_the_traps():
    """The reference itself: float traps really are traps, and sub-ns durations survive."""
    for token in float_trap_tokens(3):
        whole, frac = token.split(".")
        assert round(float(token) * 1000) != int(whole) * 1000 + int(frac)


def test_driver_equals_console_script(adversarial_results):
    """The driver above prints exactly what the installed `traceattr summarize ... --format json` prints."""
    path, tables = adversarial_results["two_windows_one_rank"]
    proc = subprocess.run(["traceattr", "summarize", str(path), "--format", "json", "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == tables["kernel"]


def test_uint64_arg_is_loaded_or_refused_in_one_line(tmp_path):
    """An integer arg above int64 (a uint64 `External id`) once escaped as an OverflowError traceback."""
    b = overlap_mix(TraceBuilder("C", display_unit="ms"), C0)
    b.add({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 4242, "tid": 4243,
           "ts": b.token(C0 - 5_000_000), "dur": b.token(1_000, duration=True),
           "args": {"External id": 2**63 + 5}})
    path = b.write(tmp_path / "rank0.json")
    proc = subprocess.run(["traceattr", "summarize", str(path), "--format", "json", "--no-cache", "-q"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 2:       # refused: one line that names the file
        assert str(path) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-500:]
        rows = json.loads(proc.stdout)
        assert sum(row["self_ns"] for row in rows) == reference([path])[(0, 0)].busy_ns
