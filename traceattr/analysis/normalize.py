"""Normalized keys: the same kernel from two builds (or two GPUs) gets the same key.

What differs between builds of one kernel and is removed (raw names are always kept beside the key):
* the parameter list `(int, float const*, ...)` after the name and a leading `void `;
* integer literals inside template arguments (`<4, Functor<float>, Array<char*, 3> >` ->
  `<N, Functor<float>, Array<char*, N>>`): vector widths and unroll factors, not the algorithm; the type
  arguments that tell `add` from `relu` stay;
* `(anonymous namespace)`, `{anonymous}` and `<unnamed>` spell one thing;
* hex addresses (`0x7f3a...`) and long hex hashes (`_a1b2c3d4e5`, cutlass/cuDNN generated names);
* the running index of generated Triton kernels (`triton_poi_fused_add_0` -> `triton_poi_fused_add`);
* the GPU family prefix of cuBLAS kernels (`ampere_sgemm_128x64_tn`, `volta_sgemm_128x64_tn` ->
  `<arch>_sgemm_128x64_tn`).
Normalizing runs once per distinct name, never per event.
"""

from __future__ import annotations

import re

from traceattr.names import strip_parameters

_ANONYMOUS = re.compile(r"\(anonymous namespace\)|\{anonymous\}|<unnamed>|`anonymous namespace'")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_HEX_HASH = re.compile(r"_(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")
_TRITON_INDEX = re.compile(r"^(triton_\w*?)_\d+$")
_ARCH = re.compile(r"^(?:maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell|sm\d{2,3}a?)_(?=\w)")
_INTEGER = re.compile(r"(?<![\w.])\d+(?:ul|u|l|ll|ull)?(?![\w.])")
_SPACES = re.compile(r"\s+")
ANONYMOUS = "(anonymous)"


def normalize_kernel_name(name: str) -> str:
    """The build-independent key of one kernel name (see the module docstring)."""
    text = _SPACES.sub(" ", name.strip())
    text = _ANONYMOUS.sub(ANONYMOUS, text)
    text = _ADDRESS.sub("0x?", text)
    if text.startswith("void "):
        text = text[5:]
    text = strip_parameters(text)
    text = _reduce_templates(text)
    text = _HEX_HASH.sub("_<hash>", text)
    text = _TRITON_INDEX.sub(r"\1", text)
    return _ARCH.sub("<arch>_", text)


def normalize_text(name: str) -> str:
    """Op, module and annotation names: only addresses and whitespace vary between runs."""
    return _SPACES.sub(" ", _ADDRESS.sub("0x?", name.strip()))


def _reduce_templates(text: str) -> str:
    """Integer literals inside <...> become N; `> >` becomes `>>`."""
    out, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "<":
            if depth == 0:
                out.append(text[start:i])
                start = i
            depth += 1
        elif char == ">" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(_INTEGER.sub("N", text[start:i + 1]))
                start = i + 1
    out.append(text[start:])
    return "".join(out).replace("> >", ">>").replace("> >", ">>")
