"""Performance models: the FLOPs and bytes one call of an op does, from its record_shapes args.

`work(name, dims, types, concrete)` takes the three JSON texts of a cpu op (io/shapes.py: `Input Dims`,
`Input type`, `Concrete Inputs`) and returns a Work (flops, bytes, dtype, family) or a Skip saying why there
is no number: an op without a model, or args that do not fit its model (malformed, absurd, unknown dtype).
Never a guess: every number follows from the shapes by the formulas below, written once, documented in
docs/roofline.md and checked by hand-computed cases (tests/test_perfmodels.py).

Conventions (the usual ones, and TraceLens's, so the two tables join): a multiply-add is 2 FLOPs; bytes are
each tensor argument read once and each output written once (dims x element size), no cache reuse, no
workspace; attention counts its two GEMMs (FlashAttention's benchmark convention: causal halves them,
backward is 2.5x forward); elementwise ops and reductions count one FLOP per output (input) element.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

# one dimension, one tensor, one call: beyond these the shapes are forged or corrupt, not a workload
MAX_DIM = 1 << 40
MAX_ELEMENTS = 1 << 48
MAX_FLOPS = 1 << 62

# `Input type` texts -> (bytes per element, dtype class of the peak tables in peaks.py)
DTYPES = {
    "double": (8, "fp64"), "float": (4, "fp32"), "c10::Half": (2, "fp16"), "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"), "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"), "unsigned char": (1, "int8"),
    "bool": (1, "int8"), "short int": (2, "int16"), "int": (4, "int32"), "long int": (8, "int64"),
    "c10::complex<float>": (8, "fp32"), "c10::complex<double>": (16, "fp64"),
}
# torch ScalarType numbers (c10/core/ScalarType.h), as `Concrete Inputs` writes an `out_dtype`
SCALAR_TYPES = {5: "c10::Half", 6: "float", 7: "double", 15: "c10::BFloat16", 23: "c10::Float8_e5m2",
                24: "c10::Float8_e4m3fn", 25: "c10::Float8_e5m2fnuz", 26: "c10::Float8_e4m3fnuz"}


@dataclass(frozen=True)
class Work:
    flops: int          # per call
    bytes: int          # per call
    dtype: str          # the dtype class of the op's math (peaks.py): bf16, fp32, fp8...
    family: str         # gemm, conv, attention, norm, softmax, elementwise, reduction


@dataclass(frozen=True)
class Skip:
    reason: str         # NO_MODEL or BAD_ARGS


NO_MODEL = "no model"
NO_SHAPES = "no Input Dims"             # record_shapes was off (or the text was over-long: io/shapes.py)
BAD_ARGS = "args that do not fit the model"
_NO = Skip(NO_MODEL)
_NO_SHAPES = Skip(NO_SHAPES)
_BAD = Skip(BAD_ARGS)


class _Bad(Exception):
    """Args that do not fit the op's model."""


def work(name: str, dims_text: str, types_text: str, concrete_text: str = "") -> Work | Skip:
    """The work of one call of op `name` with these record_shapes texts, or why there is none."""
    model = MODELS.get(name)
    if model is None:
        return _NO
    if not dims_text:
        return _NO_SHAPES
    try:
        found = model(_Args(dims_text, types_text, concrete_text))
    except (_Bad, ValueError, TypeError, IndexError, KeyError, RecursionError):
        return _BAD
    if not (0 <= found.flops <= MAX_FLOPS and 0 < found.bytes <= MAX_FLOPS):
        return _BAD
    return found


class _Args:
    """The parsed args of one call; every accessor raises _Bad on anything outside its model."""

    def __init__(self, dims_text: str, types_text: str, concrete_text: str) -> None:
        self.dims = json.loads(dims_text) if dims_text else None
        self.types = json.loads(types_text) if types_text else None
        self.concrete = json.loads(concrete_text) if concrete_text else []
        if not isinstance(self.dims, list) or not isinstance(self.types, list) or len(self.dims) != len(self.types):
            raise _Bad
        if not isinstance(self.concrete, list):
            raise _Bad

    def shape(self, i: int, rank: int | tuple[int, ...] | None = None) -> list[int]:
        """The dims of tensor argument i (of `rank` dims, or one of those ranks)."""
        if i >= len(self.dims):
            raise _Bad
        dims = self.dims[i]
        if not isinstance(dims, list) or not all(type(d) is int and 0 <= d <= MAX_DIM for d in dims):
            raise _Bad
        if rank is not None and len(dims) not in (rank if isinstance(rank, tuple) else (rank,)):
            raise _Bad
        if math.prod(dims) > MAX_ELEMENTS:
            raise _Bad
        return dims

    def has_tensor(self, i: int) -> bool:
        """Whether argument i is a tensor that was given (an optional bias is [] with a type, or absent)."""
        return i < len(self.dims) and isinstance(self.dims[i], list) and len(self.dims[i]) > 0 and \
            self.types[i] in DTYPES

    def size(self, i: int) -> int:
        """Bytes per element of argument i."""
        return self._dtype(i)[0]

    def dtype(self, i: int) -> str:
        return self._dtype(i)[1]

    def _dtype(self, i: int) -> tuple[int, str]:
        if i >= len(self.types) or self.types[i] not in DTYPES:
            raise _Bad
        return DTYPES[self.types[i]]

    def nbytes(self, i: int) -> int:
        return math.prod(self.shape(i)) * self.size(i)

    def text(self, i: int) -> str:
        """Concrete input i as written ("" when absent)."""
        value = self.concrete[i] if i < len(self.concrete) else ""
        if not isinstance(value, str):
            raise _Bad
        return value

    def flag(self, i: int, default: bool | None = None) -> bool:
        value = self.text(i)
        if value in ("True", "False"):
            return value == "True"
        if value == "" and default is not None:
            return default
        raise _Bad

    def ints(self, i: int, count: int, default: int | None = None) -> list[int]:
        """A list of `count` ints from concrete input i ("[1, 1]", or one int for all)."""
        value = self.text(i)
        if value == "" and default is not None:
            return [default] * count
        parsed = _literal(value)
        values = parsed if isinstance(parsed, list) else [parsed]
        if len(values) == 1:
            values = values * count
        if len(values) != count or not all(type(v) is int and 0 <= v <= MAX_DIM for v in values):
            raise _Bad
        return values

    def int(self, i: int, default: int | None = None) -> int:
        return self.ints(i, 1, default)[0]


# --- GEMM family ------------------------------------------------------------------------------

def _gemm(batch: int, m: int, n: int, k: int, a: int, b: int, out: int, bias_bytes: int, dtype: str,
          bias_flops: int = 0) -> Work:
    """batch x (M x K) @ (K x N): 2MNK per matrix (+ MN for an added bias); bytes A + B + C (+ bias)."""
    flops = batch * 2 * m * n * k + bias_flops
    return Work(flops, batch * (m * k * a + k * n * b + m * n * out) + bias_bytes, dtype, "gemm")


def _mm(x: _Args) -> Work:                       # mm(self [M,K], mat2 [K,N])
    (m, k), (k2, n) = x.shape(0, 2), x.shape(1, 2)
    _same(k, k2)
    return _gemm(1, m, n, k, x.size(0), x.size(1), x.size(0), 0, x.dtype(0))


def _addmm(x: _Args) -> Work:                    # addmm(bias, mat1 [M,K], mat2 [K,N], beta, alpha)
    (m, k), (k2, n) = x.shape(1, 2), x.shape(2, 2)
    _same(k, k2)
    bias = x.shape(0, (1, 2))
    return _gemm(1, m, n, k, x.size(1), x.size(2), x.size(1), math.prod(bias) * x.size(0), x.dtype(1),
                 bias_flops=m * n)


def _bmm(x: _Args) -> Work:                      # bmm(self [B,M,K], mat2 [B,K,N])
    (b, m, k), (b2, k2, n) = x.shape(0, 3), x.shape(1, 3)
    _same(k, k2), _same(b, b2)
    return _gemm(b, m, n, k, x.size(0), x.size(1), x.size(0), 0, x.dtype(0))


def _baddbmm(x: _Args) -> Work:                  # baddbmm(bias, batch1 [B,M,K], batch2 [B,K,N], beta, alpha)
    (b, m, k), (b2, k2, n) = x.shape(1, 3), x.shape(2, 3)
    _same(k, k2), _same(b, b2)
    bias = x.shape(0)
    return _gemm(b, m, n, k, x.size(1), x.size(2), x.size(1), math.prod(bias) * x.size(0), x.dtype(1),
                 bias_flops=b * m * n)


def _matmul(x: _Args) -> Work:                   # matmul(a [..., M, K] or [K], b [..., K, N] or [K])
    a, b = x.shape(0, (1, 2, 3, 4, 5, 6)), x.shape(1, (1, 2, 3, 4, 5, 6))
    m, k = (1, a[0]) if len(a) == 1 else (a[-2], a[-1])
    k2, n = (b[0], 1) if len(b) == 1 else (b[-2], b[-1])
    _same(k, k2)
    batch_a, batch_b = a[:-2], b[:-2]
    batch = _broadcast(batch_a, batch_b)
    count = math.prod(batch)
    # each operand is read once whatever the broadcast; the output has the broadcast batch
    flops = count * 2 * m * n * k
    nbytes = math.prod(a) * x.size(0) + math.prod(b) * x.size(1) + count * m * n * x.size(0)
    return Work(flops, nbytes, x.dtype(0), "gemm")


def _linear(x: _Args) -> Work:                   # linear(input [..., K], weight [N, K], bias [N] or absent)
    a = x.shape(0, (1, 2, 3, 4, 5, 6))
    n, k = x.shape(1, 2)
    _same(a[-1], k)
    m = math.prod(a[:-1])
    bias = x.has_tensor(2)
    bias_bytes = math.prod(x.shape(2, 1)) * x.size(2) if bias else 0
    return _gemm(1, m, n, k, x.size(0), x.size(1), x.size(0), bias_bytes, x.dtype(0), bias_flops=m * n if bias else 0)


def _scaled_mm(x: _Args) -> Work:
    # _scaled_mm(self [M,K], mat2 [K,N], scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
    (m, k), (k2, n) = x.shape(0, 2), x.shape(1, 2)
    _same(k, k2)
    out = x.size(0)
    if x.text(6):        # out_dtype as a ScalarType number; absent: the input's dtype (torch's default)
        out = DTYPES[SCALAR_TYPES[int(x.text(6))]][0]
    scales = sum(x.nbytes(i) for i in (2, 3) if x.has_tensor(i))
    bias = x.nbytes(4) if x.has_tensor(4) else 0
    return _gemm(1, m, n, k, x.size(0), x.size(1), out, scales + bias, x.dtype(0), bias_flops=m * n if bias else 0)


def _grouped_mm(x: _Args) -> Work:
    # _grouped_mm(mat_a [M_total, K], mat_b [G, K, N], offs [G], bias, out_dtype): each row of A meets one
    # group's B, as the offsets say: 2 x M_total x K x N whatever the split
    (m, k), (g, k2, n) = x.shape(0, 2), x.shape(1, 3)
    _same(k, k2)
    _same(x.shape(2, 1)[0], g)
    nbytes = m * k * x.size(0) + g * k * n * x.size(1) + m * n * x.size(0)
    return Work(2 * m * n * k, nbytes, x.dtype(0), "gemm")


# --- convolution ------------------------------------------------------------------------------

def _conv_work(x: _Args, inp: int, weight: int, stride: int, padding: int, dilation: int, transposed: int | None,
               output_padding: int | None, groups: int) -> tuple[int, int, int]:
    """(flops of the forward convolution, input elements, output elements). Bias adds are not counted
    (TraceLens does not count them either; 1 FLOP per output beside 2 x C_in/groups x kernel)."""
    shape_in, shape_w = x.shape(inp, (3, 4, 5)), x.shape(weight, (3, 4, 5))
    if len(shape_in) != len(shape_w):
        raise _Bad
    spatial = len(shape_in) - 2
    s, p, d = x.ints(stride, spatial, 1), x.ints(padding, spatial, 0), x.ints(dilation, spatial, 1)
    is_transposed = x.flag(transposed, False) if transposed is not None else False
    out_pad = x.ints(output_padding, spatial, 0) if output_padding is not None else [0] * spatial
    g = x.int(groups, 1)
    kernel = shape_w[2:]
    if g < 1 or min(s) < 1 or min(d) < 1:
        raise _Bad
    n, c_in = shape_in[0], shape_in[1]
    if is_transposed:       # weight [C_in, C_out/groups, k...]
        c_out = shape_w[1] * g
        _same(shape_w[0], c_in)
        out = [(i - 1) * st - 2 * pa + di * (kk - 1) + op + 1
               for i, st, pa, di, kk, op in zip(shape_in[2:], s, p, d, kernel, out_pad)]
        if min(out) < 1:
            raise _Bad
        flops = 2 * n * c_in * math.prod(shape_in[2:]) * (c_out // g) * math.prod(kernel)
    else:                   # weight [C_out, C_in/groups, k...]
        c_out = shape_w[0]
        _same(shape_w[1] * g, c_in)
        out = [(i + 2 * pa - di * (kk - 1) - 1) // st + 1 for i, st, pa, di, kk in zip(shape_in[2:], s, p, d, kernel)]
        if min(out) < 1:
            raise _Bad
        flops = 2 * n * c_out * math.prod(out) * (c_in // g) * math.prod(kernel)
    return flops, math.prod(shape_in), n * c_out * math.prod(out)


def _convolution(x: _Args) -> Work:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    flops, n_in, n_out = _conv_work(x, 0, 1, 3, 4, 5, 6, 7, 8)
    return Work(flops, (n_in + n_out) * x.size(0) + x.nbytes(1), x.dtype(0), "conv")


def _convolution_backward(x: _Args) -> Work:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask): the input and weight gradients each cost
    # one forward's FLOPs
    flops, n_in, n_out = _conv_work(x, 1, 2, 4, 5, 6, 7, 8, 9)
    mask = _literal(x.text(10)) if x.text(10) else [True, True, True]
    if not isinstance(mask, list) or len(mask) != 3 or not all(isinstance(v, bool) for v in mask):
        raise _Bad
    size, weight = x.size(1), x.nbytes(2)
    nbytes = (n_out + n_in) * size + weight + mask[0] * n_in * size + mask[1] * weight
    return Work(flops * (mask[0] + mask[1]), nbytes, x.dtype(1), "conv")


# --- attention --------------------------------------------------------------------------------

def _attention(x: _Args, q: int, causal: int, backward: bool) -> Work:
    """SDPA with q [B, H, Nq, d], k [B, Hkv, Nkv, d], v [B, Hkv, Nkv, dv] at q, q+1, q+2: the two GEMMs
    (QK^T and PV), 2 x B x H x Nq x Nkv x (d + dv); causal halves them; backward is 2.5x (five GEMMs of
    that size for two). Bytes: q, k, v read and the output written (backward: also grad_out read and the
    three gradients written)."""
    (b, h, nq, d), (b2, hk, nk, d2), (b3, hv, nk2, dv) = x.shape(q, 4), x.shape(q + 1, 4), x.shape(q + 2, 4)
    _same(b, b2), _same(b, b3), _same(d, d2), _same(nk, nk2), _same(hk, hv)
    if hk == 0 or h % hk:
        raise _Bad
    flops = 2 * b * h * nq * nk * (d + dv)
    if x.flag(causal):
        flops //= 2
    size = x.size(q)
    qkv = (b * h * nq * d + b * hk * nk * (d + dv)) * size
    out = b * h * nq * dv * size
    if backward:
        return Work(flops * 5 // 2, qkv + 2 * out + qkv, x.dtype(q), "attention")
    return Work(flops, qkv + out, x.dtype(q), "attention")


def _sdpa(q: int, causal: int, backward: bool = False):
    return lambda x: _attention(x, q, causal, backward)


# --- norms, softmax, elementwise, reductions (bytes-bound) --------------------------------------

def _layer_norm(x: _Args) -> Work:
    # layer_norm / native_layer_norm(input, normalized_shape, weight, bias, eps): 5 FLOPs an element
    # (mean, variance, normalize, scale, shift); input read, output written, weight and bias read
    n = math.prod(x.shape(0))
    params = sum(x.nbytes(i) for i in (2, 3) if x.has_tensor(i))
    return Work(5 * n, 2 * n * x.size(0) + params, x.dtype(0), "norm")


def _rms_norm(x: _Args) -> Work:
    # rms_norm(input, normalized_shape, weight, eps): 4 FLOPs an element (square, mean, normalize, scale)
    n = math.prod(x.shape(0))
    params = x.nbytes(2) if x.has_tensor(2) else 0
    return Work(4 * n, 2 * n * x.size(0) + params, x.dtype(0), "norm")


def _softmax(x: _Args) -> Work:
    # softmax / _softmax / log_softmax(input, dim, ...): 5 FLOPs an element (max, subtract, exp, sum, divide)
    n = math.prod(x.shape(0))
    return Work(5 * n, 2 * n * x.size(0), x.dtype(0), "softmax")


def _unary(x: _Args) -> Work:
    # one tensor in, one out of the same shape: 1 FLOP an element
    n = math.prod(x.shape(0))
    return Work(n, 2 * n * x.size(0), x.dtype(0), "elementwise")


def _copy(x: _Args) -> Work:
    # copy_(self, src): src read, self written (a cast when their dtypes differ); no FLOPs
    return Work(0, x.nbytes(0) + math.prod(x.shape(1)) * x.size(1), x.dtype(0), "elementwise")


def _binary(x: _Args) -> Work:
    # two operands (a tensor and a tensor or a scalar), the output of their broadcast shape: 1 FLOP an output
    # element; each tensor operand read once, the output written in the first operand's dtype
    tensors = [i for i in (0, 1) if x.has_tensor(i) or (i == 0)]
    shapes = [x.shape(i) for i in tensors]
    out = shapes[0]
    for other in shapes[1:]:
        out = _broadcast(out, other)
    n = math.prod(out)
    return Work(n, sum(math.prod(s) * x.size(i) for s, i in zip(shapes, tensors)) + n * x.size(0), x.dtype(0),
                "elementwise")


def _reduction(x: _Args) -> Work:
    # sum / mean / amax / amin(self, dim, keepdim, ...): 1 FLOP an input element; input read, output written
    shape = x.shape(0)
    n = math.prod(shape)
    dims = json.loads(x.text(1)) if x.text(1) else []
    dims = dims if isinstance(dims, list) else [dims]
    if not all(type(d) is int and -len(shape) <= d < max(len(shape), 1) for d in dims):
        raise _Bad
    reduced = {d % len(shape) for d in dims} if shape else set()
    out = math.prod(s for i, s in enumerate(shape) if reduced and i not in reduced)
    return Work(n, n * x.size(0) + out * x.size(0), x.dtype(0), "reduction")


def _literal(text: str):
    """A concrete input's list or number: JSON, or Python's spelling of booleans ("[True, False]")."""
    return json.loads(text.replace("True", "true").replace("False", "false"))


def _same(a: int, b: int) -> None:
    if a != b:
        raise _Bad


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    """The broadcast of two shapes (numpy's rules), or _Bad."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x, y = (a[-i] if i <= len(a) else 1), (b[-i] if i <= len(b) else 1)
        if x != y and 1 not in (x, y):
            raise _Bad
        out.append(y if x == 1 else x)
    return out[::-1]


_UNARY = ("relu", "gelu", "silu", "sigmoid", "tanh", "exp", "neg", "abs", "sqrt", "rsqrt", "reciprocal",
          "clamp_min", "clamp", "threshold", "hardtanh", "leaky_relu", "erf", "log", "sin", "cos")
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "gelu_backward", "threshold_backward",
           "silu_backward", "sigmoid_backward", "tanh_backward")
_REDUCTIONS = ("sum", "mean", "amax", "amin")

MODELS = {
    "aten::mm": _mm, "aten::addmm": _addmm, "aten::bmm": _bmm, "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul, "aten::linear": _linear, "aten::_scaled_mm": _scaled_mm,
    "aten::_grouped_mm": _grouped_mm,
    # conv1d/2d/3d call aten::convolution, which has every arg (transposed, output_padding): modelled there
    "aten::convolution": _convolution, "aten::convolution_backward": _convolution_backward,
    "aten::scaled_dot_product_attention": _sdpa(0, 5),
    "aten::_scaled_dot_product_flash_attention": _sdpa(0, 4),
    "aten::_scaled_dot_product_efficient_attention": _sdpa(0, 6),
    "aten::_scaled_dot_product_cudnn_attention": _sdpa(0, 6),
    "aten::_scaled_dot_product_flash_attention_backward": _sdpa(1, 11, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": _sdpa(1, 11, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _sdpa(1, 14, backward=True),
    "aten::layer_norm": _layer_norm, "aten::native_layer_norm": _layer_norm,
    "aten::rms_norm": _rms_norm, "aten::_fused_rms_norm": _rms_norm,
    "aten::softmax": _softmax, "aten::_softmax": _softmax, "aten::log_softmax": _softmax,
    "aten::_log_softmax": _softmax,
    "aten::copy_": _copy,
    **{f"aten::{op}": _unary for op in _UNARY}, **{f"aten::{op}_": _unary for op in _UNARY},
    **{f"aten::{op}": _binary for op in _BINARY}, **{f"aten::{op}_": _binary for op in _BINARY},
    **{f"aten::{op}": _reduction for op in _REDUCTIONS},
}
# ops whose model covers the whole op, helpers included: the layout transposes, bias adds and fills their
# inner ops launch count for them (shape_keys.py), as their FLOPs were paid with that time
COMPOSITE = frozenset(name for name in MODELS if "convolution" in name or "attention" in name)
