"""Communication classification (traceattr/io/comm_rules.py): every rule of the table, on real files, per rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import traceattr
from traceattr import schema as S
from traceattr.attribution.sweep import sweep
from traceattr.errors import TraceInputError
from traceattr.io.comm_rules import RULE_NAMES, apply_patterns, compile_patterns, rule_of_rows, time_by_rule

BASE = 1790857026000000000


def _trace(path, kernels, ops=()):
    """kernels: (name, args, launched under op index or None); ops: (cat, name, start_us, end_us)."""
    events = [{"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": 9, "ts": start, "dur": end - start}
              for cat, name, start, end in ops]
    for i, (name, args, op) in enumerate(kernels):
        at = ops[op][2] + 1 if op is not None else 5000 + 100 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9,
                       "ts": at, "dur": 1, "args": {"correlation": 100 + i}})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10_000 + 100 * i,
                       "dur": 50, "args": {"correlation": 100 + i, **args}})
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": BASE,
                                "distributedInfo": {"rank": 0, "world_size": 1}}))
    return traceattr.load(path, cache=False, jobs=1)


NAME_CASES = [
    ("nccl", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
    ("nccl", "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"),
    ("nccl", "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"),
    ("rccl", "rcclGenericKernel<1>"),
    ("hccl", "hcclAllReduceKernel"),
    ("msccl", "mscclKernel_Sum_float_LL128"),
    ("msccl", "void mscclpp::allreduce6<float>(float*, mscclpp::DeviceHandle<mscclpp::SmChannel>*)"),
    ("nvshmem", "nvshmemi_transfer_rma_kernel<0>"),
    ("deepep", "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)"),
    ("deepep", "void deep_ep::internode::combine<true, 8, 4>(int4*, float*)"),
    ("deepep", "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, float*)"),
    ("deepep", "void deep_ep::intranode::notify_dispatch<8>(int const*, int*)"),
    ("deepep", "void dpsk::ep::internode_ll::combine<7168>(void*)"),
    ("custom allreduce", "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*, vllm::RankSignals)"),
    ("custom allreduce", "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 4>(vllm::RankData*)"),
    ("custom allreduce", "void sglang::oneShotAllReduceKernel<float, 8>(sglang::AllReduceParams)"),
    ("custom allreduce", "twoshot_allreduce_kernel<bf16>"),
]


@pytest.mark.parametrize("rule,name", NAME_CASES, ids=[f"{r}-{n[:30]}" for r, n in NAME_CASES])
def test_each_name_rule(tmp_path, rule, name):
    ts = _trace(tmp_path / "t.json", [(name, {}, None), ("ampere_sgemm_128x64_tn", {}, None)])
    categories = ts.device.column(S.CATEGORY).to_pylist()
    assert categories == [S.COMMUNICATION, S.COMPUTE]
    assert RULE_NAMES[rule_of_rows(ts)[0]] == rule and rule_of_rows(ts)[1] == -1


def test_own_collective_arg(tmp_path):
    ts = _trace(tmp_path / "t.json", [("my_fused_comm_kernel", {"Collective name": "allreduce"}, None)])
    assert ts.device.column(S.CATEGORY).to_pylist() == [S.COMMUNICATION]
    assert RULE_NAMES[rule_of_rows(ts)[0]] == "collective arg"


@pytest.mark.parametrize("op_cat,op_name", [("cpu_op", "record_param_comms"), ("cpu_op", "c10d::broadcast_"),
                                            ("user_annotation", "nccl:all_reduce")])
def test_launching_op(tmp_path, op_cat, op_name):
    ops = [("cpu_op", "aten::step", 0, 1000), (op_cat, op_name, 100, 200), ("cpu_op", "aten::mm", 300, 400)]
    ts = _trace(tmp_path / "t.json", [("void p2p_copy_kernel<float>()", {}, 1), ("void gemm()", {}, 2)], ops)
    assert ts.device.column(S.CATEGORY).to_pylist() == [S.COMMUNICATION, S.COMPUTE]
    assert RULE_NAMES[rule_of_rows(ts)[0]] == "launching op"


def test_launching_op_is_the_innermost(tmp_path):
    # a copy launched by aten::copy_ inside c10d::allgather_ is the op's compute, not communication
    ops = [("cpu_op", "c10d::allgather_", 0, 1000), ("cpu_op", "aten::copy_", 100, 200)]
    ts = _trace(tmp_path / "t.json", [("vectorized_elementwise_kernel", {}, 1), ("ncclDevKernel_AllGather", {}, 0)], ops)
    assert ts.device.column(S.CATEGORY).to_pylist() == [S.COMPUTE, S.COMMUNICATION]


def test_collective_facts_come_from_record_param_comms(tmp_path):
    ops = [("cpu_op", "record_param_comms", 100, 200)]
    path = tmp_path / "t.json"
    _trace(path, [("ncclDevKernel_AllReduce_Sum_f32", {}, 0)], ops)
    doc = json.loads(path.read_text())
    doc["traceEvents"][0]["args"] = {"Collective name": "allreduce", "Process Group Name": "7", "Seq": 12,
                                     "Process Group Ranks": "[0, 1]", "In msg nelems": 10, "Out msg nelems": 10,
                                     "dtype": "BFloat16"}
    path.write_text(json.dumps(doc))
    row = traceattr.load(path, cache=False, jobs=1).device.to_pylist()[0]
    assert (row[S.PROCESS_GROUP], row[S.GROUP_RANKS], row[S.SEQ], row[S.COMM_BYTES]) == ("7", "[0, 1]", 12, 20)
    assert row[S.COLLECTIVE] == ""        # the kernel's own arg: not copied, so the rule stays the name's


def test_user_pattern_and_rule_time(tmp_path):
    ts = _trace(tmp_path / "t.json", [("my_a2a_kernel", {}, None), ("ncclDevKernel_SendRecv", {}, None),
                                      ("gemm", {}, None)])
    changed = apply_patterns(ts, ["a2a"])
    assert changed.device.column(S.CATEGORY).to_pylist() == [S.COMMUNICATION, S.COMMUNICATION, S.COMPUTE]
    assert apply_patterns(ts, []) is ts
    assert time_by_rule(changed, sweep(changed).self_ns) == {"nccl": 50_000, "--comm-pattern": 50_000}
    # every table agrees: the category table and the rank table count the same communication time
    by_category = traceattr.summarize(ts, by="category", comm_patterns=["a2a"])
    by_rank = traceattr.summarize(ts, by="rank", comm_patterns=["a2a"])
    comm = int(by_category.loc[by_category[S.CATEGORY] == S.COMMUNICATION, S.SELF_NS].sum())
    assert comm == int(by_rank["communication_ns"].sum()) == 100_000


def test_bad_pattern_is_one_clear_error():
    with pytest.raises(TraceInputError, match="not a regular expression"):
        compile_patterns(["(unclosed"])
    assert compile_patterns(()) == ()


def test_rule_table_is_documented():
    doc = (Path(__file__).parents[1] / "docs" / "collectives.md").read_text()
    for rule in RULE_NAMES:
        assert f"`{rule}`" in doc
    assert np.all(np.array([len(r) for r in RULE_NAMES]) > 0)


def test_comm_op_with_no_launch_inside(tmp_path):
    ops = [("cpu_op", "record_param_comms", 0, 10)]        # a comm op that launched nothing
    ts = _trace(tmp_path / "t.json", [("gemm", {}, None)], ops)
    assert ts.device.column(S.CATEGORY).to_pylist() == [S.COMPUTE]
