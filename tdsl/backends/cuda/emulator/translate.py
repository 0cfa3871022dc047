"""kernel.source (CUDA C++) -> one host C++ translation unit for the emulator.

The CUDA text is kept as it is except for four mechanical, line-anchored rewrites that let
every access be bounds-checked (the header cuda_emu.h defines what they become):

* in each ``__global__`` signature, ``const T* __restrict__ name`` -> ``tdsl_emu::gptr<const T> name``
  (a pointer that knows its buffer's extent and name);
* ``__shared__ __align__(16) T name[N];`` (or 128 .. 1024, for TMA and wgmma tiles) -> ``TDSL_EMU_SHARED(T, name, N);`` (one array per block);
* ``__align__(16) T name[N];`` -> ``TDSL_EMU_LOCAL(T, name, N);`` (one array per thread);
* ``extern __shared__ __align__(A) unsigned char tdsl_smem[];`` and each view into it,
  ``T (&name)[N] = *reinterpret_cast<T (*)[N]>(tdsl_smem + OFFSET);`` -> ``TDSL_EMU_SHARED_AT(T, name,
  N, OFFSET);`` (one array per block, within the bytes the launch gives: `tdsl_emu_set_dynamic_shared`).

After the source comes one launcher per kernel, ``tdsl_emu_run_<kernel>``, that the Python
side calls with ctypes (see `EmuParam` for the argument layout).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ....errors import TargetError

_SIGNATURE = re.compile(r'^extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*)\) \{$')
_POINTER = re.compile(r"^(const )?(.+?)\* __restrict__ (\w+)$")
_SCALAR = re.compile(r"^(.+) (\w+)$")
_SHARED = re.compile(r"^(\s*)__shared__ __align__\((?:16|128|256|512|1024)\) (.+?) (\w+)\[(\d+)\];$")
_DYNAMIC = re.compile(r"^(\s*)extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];$")
_VIEW = re.compile(r"^(\s*)(.+?) \(&(\w+)\)\[(\d+)\] = \*reinterpret_cast<.+? \(\*\)\[\d+\]>\((\w+) \+ (\d+)\);$")
_LOCAL = re.compile(r"^(\s*)__align__\(16\) (.+?) (\w+)\[(\d+)\];$")
_SIZES = {"bool": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "half": 2,
          "nv_bfloat16": 2, "int": 4, "unsigned int": 4, "float": 4, "long long": 8, "unsigned long long": 8,
          "double": 8}
_COLLECTIVE = ("__syncthreads", "__shfl", "__syncwarp", "wmma", "tdsl_mma_", "tdsl_ptx_")
BASE_STACK = 128 * 1024


@dataclass(frozen=True)
class EmuParam:
    """One kernel parameter as the signature declares it: a pointer (`const` when read only) or a scalar."""

    name: str
    ctype: str
    pointer: bool
    const: bool = False


@dataclass
class EmuKernel:
    """A kernel of the translation unit: its parameters, whether it needs fibers, its stack size."""

    name: str
    params: list[EmuParam]
    fibers: bool
    stack_bytes: int


def _params(text: str, kernel: str) -> list[EmuParam]:
    out = []
    for part in [p.strip() for p in text.split(",")] if text.strip() else []:
        m = _POINTER.match(part)
        if m:
            out.append(EmuParam(m.group(3), m.group(2), True, bool(m.group(1))))
            continue
        m = _SCALAR.match(part)
        if not m:
            raise TargetError(f"the emulator cannot read parameter {part!r} of kernel {kernel!r}")
        out.append(EmuParam(m.group(2), m.group(1).replace("const ", ""), False))
    return out


def translate(source: str) -> tuple[str, list[EmuKernel]]:
    """(the host C++ translation unit, the kernels it defines, in source order)."""
    lines = source.splitlines()
    out: list[str] = ['#include "cuda_emu.h"', "#line 1"]
    kernels: list[EmuKernel] = []
    current: EmuKernel | None = None
    local_bytes = 0
    body: list[str] = []

    def finish() -> None:
        if current is not None:
            text = "\n".join(body)
            current.fibers = any(c in text for c in _COLLECTIVE)
            current.stack_bytes = BASE_STACK + 2 * (-(-local_bytes // 4096) * 4096)

    for line in lines:
        m = _SIGNATURE.match(line)
        if m:
            finish()
            name, params = m.group(1), _params(m.group(2), m.group(1))
            current, local_bytes, body = EmuKernel(name, params, False, BASE_STACK), 0, []
            kernels.append(current)
            decl = []
            for p in params:
                if p.pointer:
                    decl.append(f"::tdsl_emu::gptr<{'const ' if p.const else ''}{p.ctype}> {p.name}")
                else:
                    decl.append(f"{p.ctype} {p.name}")
            out.append(f'extern "C" __global__ void {name}({", ".join(decl)}) {{')
            continue
        if current is not None:
            body.append(line)
        m = _SHARED.match(line)
        if m:
            out.append(f"{m.group(1)}TDSL_EMU_SHARED({m.group(2)}, {m.group(3)}, {m.group(4)});")
            continue
        m = _DYNAMIC.match(line)
        if m:
            out.append(f"{m.group(1)}TDSL_EMU_DYNAMIC_SHARED({m.group(2)});")
            continue
        m = _VIEW.match(line)
        if m:
            out.append(f"{m.group(1)}TDSL_EMU_SHARED_AT({m.group(2)}, {m.group(3)}, {m.group(4)}, {m.group(6)});")
            continue
        m = _LOCAL.match(line)
        if m:
            out.append(f"{m.group(1)}TDSL_EMU_LOCAL({m.group(2)}, {m.group(3)}, {m.group(4)});")
            local_bytes += int(m.group(4)) * _SIZES.get(m.group(2), 16)
            continue
        out.append(line)
    finish()
    if not kernels and "__global__" in source:   # (none at all: a program of host steps only)
        raise TargetError("the CUDA source has no __global__ kernel the emulator recognises")
    out.append("")
    out.append("// ---- launchers (generated by the tdsl emulator)")
    for k in kernels:
        out += _launcher(k)
    out += [('extern "C" const char* tdsl_emu_error(void) { return ::tdsl_emu::state().error; }'),
            ('extern "C" unsigned long long tdsl_emu_switches(void) { return ::tdsl_emu::state().switches; }'),
            ('extern "C" const char* tdsl_emu_bank_report(void) { return tdsl_emu_bank_text(); }'),
            ('extern "C" void tdsl_emu_bank_clear(void) { tdsl_emu_bank_reset(); }'),
            ('extern "C" const char* tdsl_emu_global_report(void) { return tdsl_emu_global_text(); }'),
            ('extern "C" void tdsl_emu_global_count(int on) { tdsl_emu_global_reset(on); }'),
            ('extern "C" void tdsl_emu_set_dynamic_shared(long long bytes) '
             '{ ::tdsl_emu::state().dynamic_shared = bytes; }')]
    return "\n".join(out) + "\n", kernels


def _launcher(k: EmuKernel) -> list[str]:
    lines = [(f'extern "C" int tdsl_emu_run_{k.name}(void** args, const long long* sizes, const long long* dims, '
              "int order, unsigned long long seed, long long only_block) {"),
             "  ::tdsl_emu::state().nregions = 0;"]
    call = []
    for i, p in enumerate(k.params):
        const = "const " if p.const else ""
        if p.pointer:
            lines.append(f'  ::tdsl_emu::add_region(args[{i}], (size_t)sizes[{i}] * sizeof({p.ctype}), "{p.name}");')
            call.append(f'::tdsl_emu::gptr<{const}{p.ctype}>(({const}{p.ctype}*)args[{i}], sizes[{i}], "{p.name}")')
        else:
            call.append(f"*(const {p.ctype}*)args[{i}]")
    lines.append(f"  auto body = [&]() {{ {k.name}({', '.join(call)}); }};")
    lines.append(f"  return ::tdsl_emu::launch(dims, order, seed, only_block, {'true' if k.fibers else 'false'}, "
                 f"{k.stack_bytes}, body);")
    lines.append("}")
    return lines
