"""Display names: short, keep what tells kernels apart, never collide within a table (real names)."""

from __future__ import annotations

import pytest

from conftest import shared_trace
from traceattr.names import display_name, display_names

VENDOR_TRACES = {   # every vendor and era in ../shared/traces that has device rows
    "nvidia a100 (cutlass, cudnn, cub, fbgemm)": "trace_diff/control/control.json.gz",
    "nvidia v100": "trace_diff/test/test.json.gz",
    "nvidia sm80 no deviceProperties": "trace_filter/sampled_rank-0.json.gz",
    "nvidia a100 nccl": "nccl_parser_config/nccl_data.json.gz",
    "nvidia v100 ns timestamps": "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "amd mi250 (tensile)": "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "critical path alexnet": "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "amd mi300 sglang (mangled aiter kernels)": "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
}


@pytest.mark.parametrize("vendor", sorted(VENDOR_TRACES))
@pytest.mark.parametrize("width", [None, 24, 27, 40])
def test_real_names_never_collide(vendor, width):
    import traceattr
    from traceattr import schema as S

    traceset = traceattr.load(shared_trace(VENDOR_TRACES[vendor]), progress=False)
    names = sorted(set(traceset.device.column(S.NAME).to_pylist()))
    assert len(names) >= 10
    shown = display_names(names, width)
    assert len(set(shown)) == len(names), "two different kernels share a display name"
    if width is not None:
        assert max(map(len, shown)) <= width
    long_names = [n for n in names if len(n) > 120]
    # the point of the exercise: long C++ names come out short
    assert all(len(display_name(n)) <= max(80, len(n) // 2) for n in long_names if "::" in n and "<" in n)


@pytest.mark.parametrize("full, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "vectorized_elementwise_kernel<CUDAFunctor_add, float>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda()#2}::operator()() const::{lambda()#12}::operator()() const::{lambda(double)#1}, "
     "at::detail::Array<char*, 2> >(int, at::native::neg_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda()#2}::operator()() const::{lambda()#12}::operator()() const::{lambda(double)#1}, "
     "at::detail::Array<char*, 2>)", "vectorized_elementwise_kernel<neg_kernel_cuda, double>"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>"
     "(cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1::Params)",
     "cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1",
     "Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),           # the index names a kernel
    ("fused_gemm_kernel_1a2b3c4d5e6f", "fused_gemm_kernel"),                 # a build hash does not
    ("aten::addmm", "aten::addmm"),
    ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
    ("<unattributed>", "<unattributed>"),
    # signedness is part of the type: `unsigned int` was shown as `int`, `unsigned char` as `char`
    ("void at::native::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>(float*, unsigned int)",
     "CatArrayBatchedCopy<float, unsigned int>"),
    ("void bar<unsigned char, signed char, 3, long long>(int)", "bar<unsigned char, signed char, long>"),
    ("void at::native::gather_kernel<unsigned char*, float, 4096, Foo>(int)", "gather_kernel<float>"),
    # extern "C" kernels (NCCL) have no overloads: their parameters never tell two apart
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
])
def test_known_rules(full, short):
    assert display_name(full) == short


def test_collisions_get_a_stable_suffix_and_hostile_names_stay_distinct():
    a = "void k<4, at::native::FillFunctor<float> >(int)"
    b = "void k<2, at::native::FillFunctor<float> >(int)"
    shown = display_names([a, b, a])
    assert shown[0] == shown[2] != shown[1]
    # the whole template arguments tell them apart, so they are shown (a hash meant nothing to a reader)
    assert shown == ["k<4, FillFunctor<float>>", "k<2, FillFunctor<float>>", "k<4, FillFunctor<float>>"]
    # names alike up to their parameters: a stable suffix from the full name
    c, d = "void k<4, at::native::FillFunctor<float> >(int)", "void k<4, at::native::FillFunctor<float> >(long)"
    shown = display_names([c, d, c])
    assert shown[0] == shown[2] != shown[1]
    assert shown[0].startswith("k<FillFunctor, float> ~") and display_names([d, c]) == [shown[1], shown[0]]
    hostile = ["<img src=x onerror=alert(1)>", "x" * 10_000, "a\nb", "\x1b[31mred\x1b[0m",
               b"bad \xff\xfe".decode("utf-8", "surrogateescape"), "x" * 9_999 + "y"]
    shown = display_names(hostile, 30)
    assert len(set(shown)) == len(hostile) and max(map(len, shown)) <= 30


LAYER_NORM = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<{}, float>({}*, float*, long)"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::{}<float>, at::detail::Array<char*, 2> >"
               "(int, at::native::{}<float>, at::detail::Array<char*, 2>)")


def test_a_narrow_column_cuts_data_types_then_the_end_of_the_kernels_own_name():
    """At 24 characters the sample's kernels read `layer_…nel<float, float>` and `vectorized…loat> ~15f2bd`:
    the middle of the kernel's name went, for data types that told nothing apart, and the functor that did
    was cut to a hash."""
    alone = display_names([LAYER_NORM.format("float", "float")], 24)
    assert alone == ["layer_norm_grad_input_k…"]
    functors = [ELEMENTWISE.format(f, f) for f in ("clamp_min_scalar_functor", "threshold_backward_functor")]
    shown = display_names(functors, 24)
    assert shown[0].startswith("vect…<clamp_min") and shown[1].startswith("vect…<threshold") and "~" not in "".join(shown)
    assert display_names([ELEMENTWISE.format("CUDAFunctor_add", "CUDAFunctor_add")], 24) == ["vector…<CUDAFunctor_add>"]
    # where the data types are what tells two kernels apart, they stay
    both = display_names([LAYER_NORM.format("float", "float"), LAYER_NORM.format("c10::Half", "c10::Half")], 30)
    assert len(set(both)) == 2 and "float" in both[0] and "Half" in both[1] and "~" not in "".join(both), both
    assert all(len(name) <= 30 for name in both)


def test_names_shortened_alike_in_different_groups_stay_apart_without_numbers():
    """Groups of colliding names resolved each on its own can land on one display name (CUTLASS tiles that
    differ in the middle, once a template's argument is cut at its end): each group's names are checked
    against the rest of the column, so no `#2` numbering is needed here."""
    tiles = ["128x128_32x3_nt", "128x128_32x3_tn", "128x64_16x6_nn", "128x64_16x6_nt", "256x128_32x3_nt",
             "64x64_16x6_nn", "64x64_16x6_nt", "64x64_32x6_nt"]
    names = [f"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_{t}_align4>"
             f"(cutlass_80_tensorop_s1688gemm_{t}_align4::Params)" for t in tiles]
    for width in (24, 27, 40):
        shown = display_names(names, width)
        assert len(set(shown)) == len(names) and max(map(len, shown)) <= width
        assert not any(" #" in name for name in shown), shown


SGLANG = "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"     # ROCm: mangled kernel names


def _bomb(levels: int) -> str:
    """A mangled name whose every function type repeats the one before it twice: output 2**levels long."""
    def sub(i: int) -> str:
        if i == 0:
            return "S_"
        digits, text, i = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", "", i - 1
        while True:
            text, i = digits[i % 36] + text, i // 36
            if i == 0:
                return f"S{text}_"
    return "_Z1f1A" + "".join(f"PFv{sub(2 * k)}{sub(2 * k)}E" for k in range(levels))


def test_mangled_names_on_a_real_rocm_trace_are_demangled_and_told_apart():
    """SGLang on MI300 names three aiter kernels by their symbols (`_ZN5aiter24add_rmsnorm_quant_kernelI…`):
    shown demangled, with the namespace and the template arguments that differ between them."""
    pytest.importorskip("pycxxfilt")
    import traceattr
    from traceattr import schema as S

    names = sorted(set(traceattr.load(shared_trace(SGLANG), cache=False, jobs=1).device.column(S.NAME).to_pylist()))
    mangled = [n for n in names if n.startswith("_ZN5aiter")]
    assert len(mangled) == 3
    shown = dict(zip(names, display_names(names)))
    aiter = sorted(shown[n] for n in mangled)
    assert aiter == ["aiter::add_rmsnorm_quant_kernel<bfloat16_t, 256, 16, false>",
                     "aiter::add_rmsnorm_quant_kernel<bfloat16_t, 256, 16, true>",
                     "aiter::add_rmsnorm_quant_kernel<bfloat16_t, 64, 8, false>"]
    narrow = dict(zip(names, display_names(names, 40)))
    assert sorted(narrow[n] for n in mangled) == ["add_rmsnorm_quant_kernel<256, 16, false>",
                                                  "add_rmsnorm_quant_kernel<256, 16, true>",
                                                  "add_rmsnorm_quant_kernel<64, 8, false>"]
    assert len(set(display_names(names, 24))) == len(names)


def test_hostile_mangled_names_are_left_as_they_are_without_a_hang():
    """A 20,000-character symbol is not handed over; one asking for 2**40 characters of output ends its
    child process (memory limit), not this one, and the names after it are still demangled."""
    pytest.importorskip("pycxxfilt")
    import time

    from traceattr.demangle import readable_names

    long_name, bomb, nested = "_ZN" + "3abc" * 5000 + "E", _bomb(40), "_Z1f" + "PFv" * 2000 + "E" * 2000
    names = [long_name, "_Zgarbage", bomb, "_Z3bari", nested, "_Z3foo\x1b[31m", "aten::mm"]
    started = time.monotonic()
    found = readable_names(names)
    assert time.monotonic() - started < 15
    assert found == {"_Z3bari": "bar(int)"}
    shown = display_names(names, 30)
    assert len(set(shown)) == len(names) and max(map(len, shown)) <= 30


def test_kernels_alike_show_the_template_arguments_that_differ_and_their_namespace():
    """`GemmKernel ~04b5bb` told nothing; `redu…<128, 4, ReduceOp<float, …nt, float, 4>>` cut the part that
    differs. Real reduce kernels (trace_diff) differ in block sizes and data types; DeepGEMM-style kernels
    in their namespace alone."""
    import traceattr
    from traceattr import schema as S

    names = sorted(set(traceattr.load(shared_trace(VENDOR_TRACES["nvidia a100 (cutlass, cudnn, cub, fbgemm)"]),
                                      progress=False).device.column(S.NAME).to_pylist()))
    sums = [n for n in names if n.startswith("void at::native::reduce_kernel<") and "sum_functor<float" in n]
    assert len(sums) >= 2
    for width in (None, 40):
        shown = display_names(names, width)
        mine = [shown[names.index(n)] for n in sums]
        assert not any("~" in s for s in mine), mine
        for name, short in zip(sums, mine):
            block = name.split("<", 1)[1].split(",")[:2]       # reduce_kernel<128, 4, ...>
            assert short.endswith(f"{block[0].strip()}, {block[1].strip()}>"), (name, short)
    gemm = [f"void {ns}::GemmKernel<128u, 4096u, 7168u>(float*, int)"
            for ns in ("m_grouped_fp8_ptp128c", "m_grouped_fp8_ptp128d", "fp8_gemm")]
    assert display_names(gemm) == ["m_grouped_fp8_ptp128c::GemmKernel<128u, 4096u, 7168u>",
                                   "m_grouped_fp8_ptp128d::GemmKernel<128u, 4096u, 7168u>",
                                   "fp8_gemm::GemmKernel<128u, 4096u, 7168u>"]
    shown = display_names(gemm, 24)
    assert shown[2] == "fp8_gemm::GemmKernel" and "128c::GemmKernel" in shown[0] and "128d::" in shown[1]
    # generic namespaces (PyTorch's, CUDA libraries') say nothing and stay out
    assert display_name("void at::native::(anonymous namespace)::softmax_warp_forward<float>(float*)") \
        == "softmax_warp_forward<float>"


def test_without_the_demangler_names_stay_as_they_are(monkeypatch):
    """No `pycxxfilt` (Python 3.10, or not installed): mangled names are shown as the trace has them."""
    import importlib.util

    from traceattr import demangle

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    monkeypatch.setattr(demangle, "_known", {})
    assert demangle.readable_names(["_Z3quxi", "aten::mm"]) == {}
    assert display_names(["_Z3quxi"]) == ["_Z3quxi"]
