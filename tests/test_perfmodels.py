"""The performance models (analysis/perfmodels.py) and peak tables (analysis/peaks.py) on hand-computed cases:
each expected number below is worked out by hand from the op's shapes, not read from the code."""

from __future__ import annotations

import json

import pytest

from traceattr.analysis.peaks import PEAKS, device_entries, device_peak
from traceattr.analysis.perfmodels import BAD_ARGS, NO_MODEL, NO_SHAPES, Skip, Work, work

BF16, F32, FP8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


def call(name, dims, types, concrete=None):
    return work(name, json.dumps(dims), json.dumps(types), json.dumps(concrete) if concrete is not None else "")


def test_mm_bmm_addmm_baddbmm():
    # mm 128x256 @ 256x64 in bf16: 2*128*64*256 FLOPs; A 128*256, B 256*64, C 128*64 elements of 2 bytes
    assert call("aten::mm", [[128, 256], [256, 64]], [BF16, BF16]) == \
        Work(4_194_304, (32_768 + 16_384 + 8_192) * 2, "bf16", "gemm")
    # addmm: + M*N for the bias, whose [N] is read too (TraceLens's golden 788x768x768: 0.930167808 GFLOP)
    assert call("aten::addmm", [[768], [788, 768], [768, 768], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"]) == \
        Work(930_167_808, 3_601_920, "bf16", "gemm")
    # bmm 8 x (16x32 @ 32x4) in fp32
    assert call("aten::bmm", [[8, 16, 32], [8, 32, 4]], [F32, F32]) == \
        Work(8 * 2 * 16 * 4 * 32, 8 * (16 * 32 + 32 * 4 + 16 * 4) * 4, "fp32", "gemm")
    # baddbmm: bias [8, 16, 4] added: + 8*16*4 FLOPs and its 512 elements read
    assert call("aten::baddbmm", [[8, 16, 4], [8, 16, 32], [8, 32, 4], [], []], [F32] * 3 + ["Scalar"] * 2) == \
        Work(8 * 2 * 16 * 4 * 32 + 512, 8 * (16 * 32 + 32 * 4 + 16 * 4) * 4 + 512 * 4, "fp32", "gemm")


def test_matmul_linear_and_scaled_mm():
    # matmul [2, 3, 10, 20] @ [20, 5]: batch 6 broadcast, B read once
    assert call("aten::matmul", [[2, 3, 10, 20], [20, 5]], [BF16, BF16]) == \
        Work(6 * 2 * 10 * 5 * 20, (1200 + 100 + 300) * 2, "bf16", "gemm")
    # linear [4, 8, 16] x weight [32, 16] + bias [32]: M = 32 rows
    assert call("aten::linear", [[4, 8, 16], [32, 16], [32]], [BF16, BF16, BF16]) == \
        Work(2 * 32 * 32 * 16 + 32 * 32, (32 * 16 + 16 * 32 + 32 * 32) * 2 + 32 * 2, "bf16", "gemm")
    # linear without bias: the bias slot is [] (None)
    assert call("aten::linear", [[32, 16], [32, 16], []], [BF16, BF16, ""]).flops == 2 * 32 * 32 * 16
    # _scaled_mm fp8 64x128 @ 128x256, two scalar scales (fp32, 1 element), out_dtype 15 = bf16
    dims = [[64, 128], [128, 256], [], [], [], [], [], []]
    types = [FP8, FP8, F32, F32, "", "", "ScalarType", "Scalar"]
    dims[2], dims[3] = [1], [1]
    got = call("aten::_scaled_mm", dims, types, ["", "", "", "", "", "", "15", "False"])
    assert got == Work(2 * 64 * 256 * 128, 64 * 128 + 128 * 256 + 64 * 256 * 2 + 8, "fp8", "gemm")
    # grouped: A [96, 64] rows split over 4 groups of B [4, 64, 32] by offs [4]
    assert call("aten::_grouped_mm", [[96, 64], [4, 64, 32], [4]], [BF16, BF16, "int"]) == \
        Work(2 * 96 * 32 * 64, (96 * 64 + 4 * 64 * 32 + 96 * 32) * 2, "bf16", "gemm")


def test_convolution_forward_groups_stride_padding_dilation():
    # TraceLens's golden patch embedding: 4x3x224x224, 768x3x16x16, stride 16 -> 14x14: 0.924844032 GFLOP
    types = [BF16, BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    concrete = ["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]
    dims = [[4, 3, 224, 224], [768, 3, 16, 16], [768], [], [], [], [], [], []]
    got = call("aten::convolution", dims, types, concrete)
    assert got == Work(924_844_032, 3_588_096, "bf16", "conv")
    # grouped, padded, dilated: N2 C8 10x10, weight 16x(8/2)x3x3, groups 2, stride 2, pad 2, dilation 2:
    # out = (10 + 4 - 2*2 - 1)//2 + 1 = 5 per side; FLOPs 2 * 2*16*5*5 * (8/2)*9
    concrete = ["", "", "", "[2, 2]", "[2, 2]", "[2, 2]", "False", "[0, 0]", "2"]
    got = call("aten::convolution", [[2, 8, 10, 10], [16, 4, 3, 3], [], [], [], [], [], [], []],
               [F32, F32, ""] + types[3:], concrete)
    assert got.flops == 2 * (2 * 16 * 25) * 4 * 9
    assert got.bytes == (2 * 8 * 100 + 2 * 16 * 25) * 4 + 16 * 4 * 9 * 4
    # transposed 1-d: N1 C4 L5, weight [4, 3, 3], stride 2: out = (5-1)*2 + 2 + 1 = 11; 2 * 1*4*5 * 3*3 FLOPs
    got = call("aten::convolution", [[1, 4, 5], [4, 3, 3], [], [], [], [], [], [], []], [F32] * 2 + [""] + types[3:],
               ["", "", "", "[2]", "[0]", "[1]", "True", "[0]", "1"])
    assert got.flops == 2 * 20 * 9 and got.bytes == (20 + 3 * 11) * 4 + 36 * 4


def test_convolution_backward_counts_each_gradient():
    fwd = 2 * (2 * 16 * 25) * 4 * 9
    dims = [[2, 16, 5, 5], [2, 8, 10, 10], [16, 4, 3, 3], [], [], [], [], [], [], [], []]
    types = [F32] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = ["", "", "", "[16]", "[2, 2]", "[2, 2]", "[2, 2]", "False", "[0, 0]", "2", "[True, True, False]"]
    assert call("aten::convolution_backward", dims, types, concrete).flops == 2 * fwd
    concrete[-1] = "[False, True, False]"
    assert call("aten::convolution_backward", dims, types, concrete).flops == fwd


def test_attention_forward_backward_causal_and_gqa():
    q = [4, 12, 197, 64]
    # TraceLens's golden flash attention: 4*B*H*N*N*d = 0.476884992 GFLOP, q k v o of 1210368 bytes each
    got = call("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []], [BF16] * 3 + ["Scalar"] * 4,
               ["", "", "", "0.", "False", "False", "0.125"])
    assert got == Work(476_884_992, 4 * 1_210_368, "bf16", "attention")
    causal = call("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []], [BF16] * 3 + ["Scalar"] * 4,
                  ["", "", "", "0.", "True", "False", "0.125"])
    assert causal.flops == 476_884_992 // 2
    # GQA through the public op: 8 query heads on 2 kv heads, Nq 16, Nkv 32, d 8
    got = call("aten::scaled_dot_product_attention", [[1, 8, 16, 8], [1, 2, 32, 8], [1, 2, 32, 8], [], [], [], [], []],
               [F32] * 3 + ["", "Scalar", "Scalar", "", "Scalar"], ["", "", "", "", "0.", "False", "", "True"])
    assert got.flops == 2 * 8 * 16 * 32 * 16
    assert got.bytes == (8 * 16 * 8 + 2 * 32 * 16 + 8 * 16 * 8) * 4
    # backward: 2.5x forward; q at position 1, is_causal at 11
    dims = [[1, 2, 16, 8]] * 5 + [[1, 2, 16]] + [[]] * 9
    concrete = [""] * 11 + ["False"] + [""] * 3
    got = call("aten::_scaled_dot_product_flash_attention_backward", dims, [F32] * 15, concrete)
    assert got.flops == 2 * 2 * 16 * 16 * 16 * 5 // 2
    # is_causal not written: no model rather than a guess
    assert call("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], [], []],
                [BF16] * 3 + ["Scalar"] * 4, ["", "", "", "0."]) == Skip(BAD_ARGS)


def test_norms_softmax_elementwise_reductions_are_bytes():
    x = [4, 197, 768]
    n = 4 * 197 * 768
    got = call("aten::native_layer_norm", [x, [], [768], [768], []], [BF16, "ScalarList", BF16, BF16, "Scalar"])
    assert got == Work(5 * n, 2 * n * 2 + 2 * 768 * 2, "bf16", "norm")
    assert call("aten::rms_norm", [x, [], [768], []], [BF16, "ScalarList", BF16, "Scalar"]) == \
        Work(4 * n, 2 * n * 2 + 768 * 2, "bf16", "norm")
    assert call("aten::_softmax", [[8, 128], [], []], [F32, "Scalar", "Scalar"]) == \
        Work(5 * 1024, 2 * 1024 * 4, "fp32", "softmax")
    # TraceLens's golden broadcast add: (4,197,768) + (1,197,768) -> 2723328 bytes, 605184 FLOPs
    assert call("aten::add", [x, [1, 197, 768], []], [BF16, BF16, "Scalar"]) == \
        Work(n, 2_723_328, "bf16", "elementwise")
    assert call("aten::mul", [x, []], [BF16, "Scalar"]) == Work(n, 2 * n * 2, "bf16", "elementwise")
    assert call("aten::gelu", [x, []], [BF16, ""]) == Work(n, 2 * n * 2, "bf16", "elementwise")
    assert call("aten::copy_", [[10, 10], [10, 10], []], [BF16, F32, "Scalar"]) == Work(0, 200 + 400, "bf16",
                                                                                         "elementwise")
    # sum over the last dim of [6, 5]: 30 elements read, 6 written; a full reduction writes one
    assert call("aten::sum", [[6, 5], [], [], []], [F32, "ScalarList", "Scalar", ""], ["", "[-1]", "False", ""]) == \
        Work(30, 36 * 4, "fp32", "reduction")
    assert call("aten::sum", [[6, 5], []], [F32, ""], ["", ""]).bytes == 31 * 4


BAD = [
    ("aten::mm", [[128, 256], [255, 64]], [BF16, BF16]),          # K mismatch
    ("aten::mm", [[128, 256, 1], [256, 64]], [BF16, BF16]),       # rank mismatch
    ("aten::mm", [[-1, 256], [256, 64]], [BF16, BF16]),           # negative
    ("aten::mm", [[2**62, 256], [256, 64]], [BF16, BF16]),        # absurd
    ("aten::mm", [["a", 256], [256, 64]], [BF16, BF16]),          # strings
    ("aten::mm", [[1.5, 256], [256, 64]], [BF16, BF16]),          # floats
    ("aten::mm", [[128, 256], [256, 64]], ["c10::Float9", BF16]),  # unknown dtype
    ("aten::mm", [[128, 256]], [BF16]),                           # missing operand
    ("aten::mm", [[128, 256], [256, 64]], [BF16]),                # dims and types disagree
    ("aten::mm", [[2**24, 2**24], [2**24, 2**24]], [BF16, BF16]),  # 2^48 elements x 2^24: FLOPs beyond 2^62
    ("aten::add", [[3, 4], [5, 4], []], [F32, F32, "Scalar"]),    # no broadcast
]


@pytest.mark.parametrize("name,dims,types", BAD)
def test_malformed_or_absurd_args_have_no_model(name, dims, types):
    assert call(name, dims, types) == Skip(BAD_ARGS)


def test_texts_that_are_not_shapes_and_ops_without_a_model():
    assert work("aten::mm", '"text"', '["float"]') == Skip(BAD_ARGS)
    assert work("aten::mm", "not json", "[]") == Skip(BAD_ARGS)
    assert work("aten::mm", "[" * 5000 + "]" * 5000, "[]") == Skip(BAD_ARGS)
    assert work("aten::mm", "", "") == Skip(NO_SHAPES)
    assert work("aten::cat", "[[[1, 2]], []]", '["TensorList", "Scalar"]') == Skip(NO_MODEL)
    assert work("aten::convolution", "[[1, 3, 4, 4], [8, 3, 5, 5], [], [], [], [], [], [], []]",
                '["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]',
                '["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]') == Skip(BAD_ARGS)   # 5 > 4


def test_device_peaks_from_device_properties():
    assert device_peak({"name": "NVIDIA H100 80GB HBM3"}).device == "H100 SXM"
    assert device_peak({"name": "NVIDIA H100 PCIe"}).device == "H100 PCIe"
    assert device_peak({"name": "NVIDIA H200"}).tbps == 4.8
    assert device_peak({"name": "NVIDIA B200"}).tflops["bf16"] == 2250.0
    assert device_peak({"name": "NVIDIA A100-PG509-200", "totalGlobalMem": 42297524224}).device == "A100 40GB"
    assert device_peak({"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920}).device == "A100 80GB"
    assert device_peak({"name": "NVIDIA L40S"}).tflops["fp8"] == 733.0
    assert device_peak({"name": "Tesla V100-SXM2-32GB"}).tflops["bf16"] is None
    assert device_peak({"name": "AMD Instinct MI300X VF"}).device == "MI300X"
    assert device_peak({"name": "AMD Instinct MI250X"}).device == "MI250X GCD"
    assert device_peak({"name": "AMD Instinct MI210"}).device == "MI250/MI210 GCD"
    # ROCm names an MI250 "AMD Radeon Graphics": gfx90a (9.0) with 104 compute units per GCD
    assert device_peak({"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0,
                        "numSms": 104}).device == "MI250/MI210 GCD"
    assert device_peak({"name": "AMD Radeon Graphics", "computeMajor": 11, "computeMinor": 0, "numSms": 48}) is None
    assert device_peak({"name": "NVIDIA GeForce RTX 4090"}) is None
    for peak in PEAKS.values():      # every table row names a bandwidth and the 16-bit peak the tables need most
        assert peak.tbps > 0 and (peak.tflops["fp16"] or 0) > 0
    assert device_entries('[{"id": 0, "name": "a"}, {"id": 1, "name": "b"}]')[1]["name"] == "b"
    assert device_entries("not json") == {} and device_entries('{"id": 0}') == {}
