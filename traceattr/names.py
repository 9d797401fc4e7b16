"""Short display names for kernel and op names, unique within one table or note (tables, notes, HTML).

A demangled C++ kernel name is hundreds of characters of namespaces, templates and parameters; what tells
two kernels apart is a few parts of it. `display_name` keeps the kernel's own name and, from its template
arguments, the functor (`CUDAFunctor_add`, `neg_kernel_cuda`), the data types and tile shapes:

    void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,
        at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)
    -> vectorized_elementwise_kernel<CUDAFunctor_add, float>

Known families are shortened by their own rule: CUTLASS `cutlass::Kernel<NAME>(NAME::Params)` is NAME;
rocBLAS/Tensile `Cijk_...` keeps its layout fields and macro tile; Triton and other plain identifiers drop
a trailing hex hash only (a Triton `_0`/`_1` index names a different kernel and stays). Names that are not
C++ (ops, annotations, module paths) are left alone apart from whitespace.

The kernel's own name keeps the namespace around it unless that one is generic (`at::native`, `cub`, `std`,
anonymous): `aiter::add_rmsnorm_quant_kernel`, `m_grouped_fp8_ptp128c::GemmKernel`. Mangled C++ symbols
(`_ZN5aiter…`) are demangled first (demangle.py).

`display_names` shortens a whole column to a width and guarantees that two different full names never
share a display name. A name too long for the width gives up its data types first, then its namespace and
the end of the kernel's own name, before the functor or tile that tells it apart
(`vector…<CUDAFunctor_add>`); names that would then collide show their data types, their whole template
arguments when those are short, or the template arguments in which they differ (`reduce_kernel<ReduceOp,
sum_functor, 128, 4>` beside `<…, 512, 1>`), else a short suffix derived from the full name (`~1228c9`).
Everything runs once per distinct name, never per event. Machine formats never use these names.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable

from traceattr.demangle import readable, readable_names

ELLIPSIS = "…"
_SPACES = re.compile(r"\s+")
_HEX_HASH = re.compile(r"_(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{8,}$")
_TILE = re.compile(r"(?<![A-Za-z0-9])(?:MT|MI)?\d+x\d+(?:x\d+)*(?![0-9x])")
_IDENT = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_~]\w*)*")
_DTYPES = {"float", "double", "half", "Half", "BFloat16", "bfloat16", "__half", "__nv_bfloat16", "bool",
           "int", "long", "short", "char", "int8_t", "uint8_t", "int16_t", "int32_t", "int64_t",
           "Float8_e4m3fn", "Float8_e5m2", "Float8_e4m3fnuz", "Float8_e5m2fnuz", "complex", "ComplexFloat",
           "ComplexDouble", "fp16", "bf16", "fp8", "tf32", "bfloat16_t", "float16_t", "half_t", "__hip_bfloat16",
           "__hip_fp8_e4m3", "__nv_fp8_e4m3", "__nv_fp8_e5m2"}
_SIGNS = {"unsigned", "signed"}      # kept with their type: `unsigned char` is not `char`
# wrappers and plumbing inside template arguments that never tell two kernels apart
_FUNCTOR = re.compile(r"(?:Functor|functor)|(?:Ops?|_kernel_cuda|_cuda_kernel|_kernel_impl|_impl|Policy\w*|"
                      r"Kernel|_kernel|Epilogue\w*|Mainloop\w*)$")
_PLUMBING = {"gpu_kernel_impl", "gpu_kernel_impl_nocast", "func_wrapper_t", "operator", "lambda",
             "elementwise_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel",
             "LoadWithoutCast", "StoreWithoutCast", "LoadWithCast", "StoreWithCast", "TrivialOffsetCalculator",
             "OffsetCalculator", "Array", "TensorIteratorBase", "TensorIterator", "TensorInfo", "ReduceOp"}
_C_FUNCTION = re.compile(r"(?:void )?([A-Za-z_]\w*)\([^()]*\)")
_MAX_PARTS = 4
_SHORT_TEMPLATE = 24   # template arguments up to this long are shown as they are
_SHORT_WHOLE = 48      # names alike: their whole template arguments are shown when the name is this short
# namespaces that say nothing about which kernel it is (PyTorch's, CUDA libraries' plumbing, anonymous)
_GENERIC_NAMESPACES = {"at", "native", "c10", "std", "detail", "details", "impl", "internal", "cuda", "hip",
                       "cub", "thrust", "cutlass", "ops", "kernel", "kernels", "device", "torch", "aten", "__1",
                       "(anonymous namespace)", "{anonymous}", "<unnamed>", "anonymous"}
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def display_name(name: str) -> str:
    """A short name for one kernel/op name (see the module docstring); never empty."""
    text = _SPACES.sub(" ", readable(str(name))).strip()
    if not text:
        return str(name)
    if text.startswith("<") and text.endswith(">"):
        return text                                 # traceattr's own rows: <other>, <unattributed>
    if text.startswith("Cijk_"):
        return _tensile(text)
    if c_function := _C_FUNCTION.fullmatch(text):
        return c_function.group(1)         # extern "C" (NCCL): no overloads, the parameters tell nothing
    if "<" not in text and not (text.endswith(")") and "::" in text):
        return _HEX_HASH.sub("", text) or text     # ops, Triton, cuBLAS/cuDNN identifiers, annotations
    if text.startswith("void "):
        text = text[5:]
    head, args = _split_templates(strip_parameters(text))
    base = _own_name(head)
    if not args:
        return _HEX_HASH.sub("", base) or text
    inner = args.strip()
    if _last_component(head).startswith(("Kernel", "device_kernel")) and re.fullmatch(r"[\w:]+", inner):
        return _last_component(inner)          # CUTLASS: the generated operator name is the kernel
    if len(inner) <= _SHORT_TEMPLATE:
        return f"{base}<{inner}>"                 # short enough to show whole: nothing to collapse
    parts = _distinguishing_parts(inner)
    return f"{base}<{', '.join(parts)}>" if parts else base


def display_names(names: Iterable[str], width: int | None = None) -> list[str]:
    """Display names of a column, each at most `width` characters, two different full names never equal."""
    full = [str(n) for n in names]
    distinct = list(dict.fromkeys(full))
    demangled = readable_names(distinct)
    text = {n: demangled.get(n, n) for n in distinct}
    whole = {n: display_name(text[n]) for n in distinct}
    shown = {n: _fit(whole[n], width) for n in distinct}
    by_shown: dict[str, list[str]] = {}
    for n in distinct:
        by_shown.setdefault(shown[n], []).append(n)
    for short, owners in by_shown.items():
        if len(owners) > 1:     # their data types, short whole template arguments, where they differ, a hash
            others = {shown[m] for m in distinct if m not in owners}
            differs = dict(zip(owners, _with_differences([whole[n] for n in owners], [text[n] for n in owners])))
            templated = {n: _templated(text[n]) for n in owners}
            windows = dict(zip(owners, _from_difference([whole[n] for n in owners])))
            short_whole = min(width or _SHORT_WHOLE, _SHORT_WHOLE)
            for attempt in (lambda n: _fit(whole[n], width, keep_types=True),
                            lambda n: _fit(whole[n], width, middle=True),        # alike but in the middle
                            lambda n: _fit(windows[n], width),
                            lambda n: templated[n] if len(templated[n]) <= short_whole else None,
                            lambda n: _fit(differs[n][0], width, keep=differs[n][1]),
                            lambda n: _fit(differs[n][0], width, keep_types=True),
                            lambda n: _fit(_split_templates(whole[n])[0], width)):    # namespaces alone differ
                tried = {n: attempt(n) for n in owners}
                if None not in tried.values() and len(set(tried.values())) == len(owners) \
                        and not others & set(tried.values()):
                    shown.update(tried)
                    break
            else:
                for n in owners:
                    shown[n] = _with_suffix(whole[n], n, width)
    if len(set(shown.values())) < len(distinct):     # groups met each other: number them, still unique
        originals, taken = set(shown.values()), set()
        for n in distinct:
            base, count = shown[n], 1
            while shown[n] in taken:
                count += 1
                tag = f" #{count}"
                numbered = _fit(base, None if width is None else width - len(tag)) + tag
                if numbered not in originals:
                    shown[n] = numbered
            taken.add(shown[n])
    return [shown[n] for n in full]


def shorten_middle(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:max(width, 0)]
    keep = width - 1
    return text[: keep * 2 // 3] + ELLIPSIS + text[len(text) - (keep - keep * 2 // 3):]


def _fit(text: str, width: int | None, keep_types: bool = False, keep: frozenset = frozenset(),
         middle: bool = False) -> str:
    """`text` in `width` characters. A `base<parts>` name gives up its data types first (`float, float` says
    less than the kernel's own name; keep_types keeps them, for names told apart by them only), then the end
    of its base (`_kernel`, not the start that names it; its middle with `middle`, for names alike that
    differ there) before its other parts, which tell kernels apart. `keep`: parts kept even when data types.
    Other names lose their middle: cuBLAS and CUTLASS names end in their tile and layout."""
    if width is None or len(text) <= width:
        return text
    width = max(width, 8)
    head, inner = _split_templates(text)
    if not inner:
        return _shorten_head(text, width) if _namespaced(text) else shorten_middle(text, width)
    parts = _top_level(inner)
    told = parts if keep_types else [part for part in parts if not _is_type(part) or part in keep]
    if not told:
        return _shorten_head(head, width, middle)
    inner = ", ".join(told)
    if len(head) + len(inner) + 2 <= width:
        return f"{head}<{inner}>"
    if len(inner) + 2 + 6 <= width:
        return _shorten_head(head, width - len(inner) - 2, middle) + "<" + inner + ">"
    # the kernel's own name keeps half the width, unless it is a wrapper that its functor names
    room = 5 if _last_component(head) in _PLUMBING else max(5, min(len(head), width // 2))
    return _shorten_head(head, room, middle) + "<" + shorten_middle(inner, width - room - 2) + ">"


def _shorten_end(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + ELLIPSIS


def _namespaced(text: str) -> bool:
    parts = _components(text)
    return len(parts) == 2 and all(_IDENTIFIER.fullmatch(part) for part in parts)


def _shorten_head(head: str, width: int, middle: bool = False) -> str:
    """A kernel's own name in `width`: a `namespace::name` gives up the middle of its namespace, then the
    namespace, before the end (or with `middle` the middle) of the name."""
    if len(head) <= width:
        return head
    if not _namespaced(head):
        return shorten_middle(head, width) if middle else _shorten_end(head, width)
    namespace, name = _components(head)
    room = width - len(name) - 2
    if room >= 5:        # its middle: versions differ at the end (`m_grouped_fp8_ptp128c`)
        return shorten_middle(namespace, room) + "::" + name
    return shorten_middle(name, width) if middle else _shorten_end(name, width)


def _top_level(inner: str) -> list[str]:
    """A template argument list split at its own commas (not those of nested templates)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        depth += char in "<(["
        depth -= char in ">)]"
        if char == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    return [part for part in parts if part]


def _is_type(part: str) -> bool:
    words = part.split()
    return bool(words) and words[-1].rsplit("::", 1)[-1] in _DTYPES and all(word in _SIGNS for word in words[:-1])


def _with_suffix(short: str, full: str, width: int | None) -> str:
    tag = "~" + hashlib.blake2b(full.encode("utf-8", "surrogateescape"), digest_size=3).hexdigest()
    return _fit(short, None if width is None else max(width, 8) - len(tag) - 1) + " " + tag


def _templated(name: str) -> str:
    """The kernel's own name with its whole template argument list, qualifiers dropped: for names whose
    short forms collide (`CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>` vs `<..., 1, 128, 1>`)."""
    text = _SPACES.sub(" ", str(name)).strip()
    text = text[5:] if text.startswith("void ") else text
    head, args = _split_templates(strip_parameters(text))
    if not args:
        return display_name(name)
    return f"{_own_name(head)}<{_QUALIFIERS.sub('', args.strip())}>"


def _with_differences(shown: list[str], texts: list[str]) -> list[tuple[str, frozenset]]:
    """Names that look alike (`shown`, their display names; `texts`, their full names), each with the
    template arguments in which it differs from the others added to its own parts (`reduce_kernel<ReduceOp,
    sum_functor, 128, 4>` beside `<…, 512, 1>`), and those arguments (kept by _fit even when data types)."""
    args = []
    for text in texts:
        text = _SPACES.sub(" ", text).strip()
        args.append(_split_templates(strip_parameters(text[5:] if text.startswith("void ") else text))[1])
    out = []
    for name, pieces in zip(shown, _differences(args)):
        head, inner = _split_templates(name)
        parts = _top_level(inner) if inner else []
        short: list[str] = []
        for piece in pieces:       # a lambda or a long expression: the parts of it that tell kernels apart
            for part in ([piece] if len(piece) <= _SHORT_TEMPLATE and "(" not in piece
                         else _distinguishing_parts(piece)):
                if part not in short:
                    short.append(part)
        short = short[:_MAX_PARTS]
        added = [part for part in short if part not in parts]
        out.append((f"{head}<{', '.join(parts + added)}>" if parts or added else head, frozenset(short)))
    return out


def _from_difference(shown: list[str]) -> list[str]:
    """Names alike whose own names share a long start: that start cut to a few characters, so the part
    where they differ shows (`split_…grad_unweighted_kernel…` beside `split_…grad_weighted_kernel…`)."""
    heads = [_split_templates(name)[0] for name in shown]
    same = len(os.path.commonprefix(heads))
    if same < 12:
        return shown
    cut = same - 4                 # a few characters of the shared part before where they differ
    return [f"{name[:6]}{ELLIPSIS}{name[cut:]}" for name in shown]


def _differences(args: list[str], head: str = "") -> list[list[str]]:
    """Per template argument list: its arguments that are not the same in all of `args` (qualifiers
    dropped). Arguments that are templates of one name are compared inside; lists of different lengths are
    shown whole (as `head<...>` inside a template named `head`)."""
    split = [_top_level(a) for a in args]
    if len({len(parts) for parts in split}) > 1:
        whole = [_QUALIFIERS.sub("", a.strip()) for a in args]
        return [[f"{head}<{w}>" if head else w] for w in whole]
    out: list[list[str]] = [[] for _ in args]
    for column in zip(*split):
        if len(set(column)) == 1:
            continue
        heads = [_split_templates(part) for part in column]
        names = {h.strip() for h, _ in heads}
        if len(names) == 1 and all(len(inner) > _SHORT_TEMPLATE for _, inner in heads):
            nested = _differences([inner for _, inner in heads], _last_component(heads[0][0]))
            for i, pieces in enumerate(nested):
                out[i].extend(pieces)
        else:
            for i, part in enumerate(column):
                out[i].append(_QUALIFIERS.sub("", part))
    return out


_QUALIFIERS = re.compile(r"(?:\(anonymous namespace\)::|[A-Za-z_]\w*::)+")


def _tensile(text: str) -> str:
    """rocBLAS/hipBLASLt Tensile kernels: layout and type fields, then the macro and matrix-instruction tiles."""
    fields = text.split("_")
    layout = [f for f in fields[:6] if f and not f[0].isdigit() and not f.startswith(("MT", "MI"))][:4]
    tiles = [f for f in fields if re.fullmatch(r"(?:MT|MI)\d+(?:x\d+)+", f)]
    return "_".join(layout + tiles)


def strip_parameters(text: str) -> str:
    """Drop a trailing balanced `( ... )` parameter list (not the `(anonymous)` inside a name)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        char = text[i]
        depth += char == ")"
        depth -= char == "("
        if depth == 0:
            head, inside = text[:i].rstrip(), text[i:]
            # a name before the list means it was a parameter list; `(anonymous)` alone is not, and
            # `Memcpy HtoD (Pinned -> Device)` names a copy kind that matters
            is_parameters = head and (head[-1].isalnum() or head[-1] in "_>") and "->" not in inside
            return head if is_parameters else text
    return text


def _split_templates(text: str) -> tuple[str, str]:
    """(the name before a trailing template list, that list's content); ("name", "") without one."""
    if not text.endswith(">"):
        return text, ""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += text[i] == ">"
        depth -= text[i] == "<"
        if depth == 0:
            return text[:i], text[i + 1:-1]
    return text, ""


def _components(qualified: str) -> list[str]:
    """`a::b<c::d>::e` -> [a, b<c::d>, e]: split at the `::` outside templates and parentheses."""
    qualified = qualified.strip()
    parts, depth, start = [], 0, 0
    for i, char in enumerate(qualified):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == ":" and depth == 0 and qualified[i + 1:i + 2] == ":" and i >= start:
            parts.append(qualified[start:i].strip())
            start = i + 2
    parts.append(qualified[start:].strip())
    return parts


def _last_component(qualified: str) -> str:
    return _components(qualified)[-1] or qualified.strip()


def _own_name(qualified: str) -> str:
    """The kernel's own name: its last component, after the namespace around it unless that one is
    generic (at::native, cub, std, anonymous) or not a plain name (a class template)."""
    parts = _components(qualified)
    last = parts[-1] or qualified.strip()
    if len(parts) > 1 and parts[-2] not in _GENERIC_NAMESPACES and _IDENTIFIER.fullmatch(parts[-2]):
        return f"{parts[-2]}::{last}"
    return last


def _distinguishing_parts(args: str) -> list[str]:
    parts: list[str] = []

    def add(part: str) -> None:
        if part and part not in parts and len(parts) < _MAX_PARTS:
            parts.append(part)

    for match in _IDENT.finditer(args):
        word = match.group(0).rsplit("::", 1)[-1]
        if word in _PLUMBING or word.startswith("lambda"):
            continue
        if _FUNCTOR.search(word) and not word[0].isdigit():
            add(word)
    words = list(_IDENT.finditer(args))
    for i, match in enumerate(words):
        word = match.group(0).rsplit("::", 1)[-1]
        if word in _SIGNS and i + 1 < len(words) and words[i + 1].group(0) in _DTYPES \
                and not args[match.end():words[i + 1].start()].strip():
            continue                               # said with its type, below: `unsigned int`, not `int`
        is_type = word in _DTYPES or word in _SIGNS
        if is_type and not args[match.end():].lstrip().startswith("*"):   # char* is plumbing
            sign = words[i - 1].group(0) if i and words[i - 1].group(0) in _SIGNS \
                and not args[words[i - 1].end():match.start()].strip() else ""
            add(f"{sign} {word}".strip())
    for match in _TILE.finditer(args):
        add(match.group(0))
    return parts
