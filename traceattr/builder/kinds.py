"""Op and kernel names per module class, shaped like what torch and CUDA libraries really emit."""

from __future__ import annotations

import zlib
from typing import NamedTuple


class OpKind(NamedTuple):
    outer: str               # the op the module calls (aten::linear)
    inner: str               # the op that launches kernels (aten::addmm)
    backward: str            # autograd node name (AddmmBackward0)
    backward_inner: str      # op the backward node runs (aten::mm)
    kernels: tuple[str, ...]
    backward_kernels: tuple[str, ...]


_ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::{f}<float>, "
                "at::detail::Array<char*, {n}> >(int, at::native::{f}<float>, at::detail::Array<char*, {n}>)")

OP_KINDS = {
    "Linear": OpKind(
        "aten::linear", "aten::addmm", "AddmmBackward0", "aten::mm",
        ("ampere_sgemm_128x64_tn", _ELEMENTWISE.format(f="CUDAFunctor_add", n=3)),
        ("ampere_sgemm_64x64_nn", "ampere_sgemm_128x32_nt",
         "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
         "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
         "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
         "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
         "unsigned int, float, 4>)")),
    "LayerNorm": OpKind(
        "aten::layer_norm", "aten::native_layer_norm", "NativeLayerNormBackward0",
        "aten::native_layer_norm_backward",
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, "
         "float const*, float const*, float const*, float*, float*, float*)",),
        ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(float const*, "
         "float const*, float const*, float const*, float const*, float*, int)",
         "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, "
         "float const*, float const*, float const*, float const*, float*, float*)")),
    "ReLU": OpKind(
        "aten::relu", "aten::clamp_min", "ReluBackward0", "aten::threshold_backward",
        (_ELEMENTWISE.format(f="clamp_min_scalar_functor", n=2),),
        (_ELEMENTWISE.format(f="threshold_backward_functor", n=3),)),
}


def op_kind(module_class: str) -> OpKind:
    """Known classes get real names; any other class gets consistent made-up ones."""
    if module_class in OP_KINDS:
        return OP_KINDS[module_class]
    low = module_class.lower()
    return OpKind(f"aten::{low}", f"aten::_{low}_impl", f"{module_class}Backward0", f"aten::_{low}_backward",
                  (f"void {low}_forward_kernel<float>(float const*, float*, long)",),
                  (f"void {low}_backward_kernel<float>(float const*, float*, long)",))


NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
OPTIMIZER_KERNEL = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
                    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::"
                    "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
                    "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)")
GRAPH_KERNEL = "void graph_fused_kernel_{i}<float>(float const*, float*, long)"
MEMCPY_NAME = "Memcpy HtoD (Pinned -> Device)"
MEMSET_NAME = "Memset (Device)"


def base_duration_ns(name: str, low_ns: int, high_ns: int) -> int:
    """A stable per-name duration, so the same kernel costs about the same in every step and run."""
    return low_ns + zlib.crc32(name.encode()) % (high_ns - low_ns)
