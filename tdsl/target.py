"""Targets: which backend builds a function, with which options, what the host CPU has, and
which CPU (name and features) a "cpu" target builds for: "llvm -mcpu=x86-64-v3" is AVX2 code on
any host that runs it; $TDSL_CPU_TARGET can make plain "cpu" mean such a CPU.

A leaf module (it imports only tdsl.errors; llvmlite only when the host is first asked about),
so that lowering, the intrinsics and the LLVM backend share one answer.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from .errors import TargetError

KNOWN_TARGETS = ("cpu", "cuda")
_ALIASES = {"cpu": "cpu", "llvm": "cpu", "host": "cpu", "cuda": "cuda", "gpu": "cuda", "nvidia": "cuda"}
CPU_OPTIONS = ("bounds_check",)
# the `-key=value` attributes of a TVM target string that tdsl understands, per kind
TARGET_ATTRS = {"cpu": ("mcpu", "mtriple", "mattr", "keys"), "cuda": ("arch", "keys")}


@dataclass(frozen=True)
class Target:
    """A build target: `kind` is "cpu" or "cuda"; `attrs` the `-key=value` parts of a TVM target
    string (`"llvm -mcpu=znver3"` -> Target("cpu", (("mcpu", "znver3"),)))."""

    kind: str
    attrs: tuple[tuple[str, str], ...] = ()

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of attribute `key` (e.g. "arch"), or `default`."""
        return dict(self.attrs).get(key, default)

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.attrs])


def parse_target(target) -> Target:
    """The Target that `lower` and `build` take: "cpu" (aliases "llvm", "host"), "cuda" (aliases
    "gpu", "nvidia"), a TVM target string ("llvm -mcpu=znver3", "cuda -arch=sm_90"), a Target,
    or an object whose `kind` (or `kind.name`, as TVM's Target has) is one of those names."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        return _parse_string(target)
    kind = getattr(target, "kind", None)
    kind = getattr(kind, "name", kind)
    if isinstance(kind, str) and kind.strip().lower() in _ALIASES:
        return Target(_ALIASES[kind.strip().lower()])
    raise TargetError(f"unknown target {target!r}; known targets: {', '.join(repr(t) for t in KNOWN_TARGETS)}")


@functools.lru_cache(maxsize=256)
def _parse_string(text: str) -> Target:
    words = text.split()
    kind = _ALIASES.get(words[0].lower()) if words else None
    if kind is None:
        raise TargetError(f"unknown target {text!r}; known targets: {', '.join(repr(t) for t in KNOWN_TARGETS)} "
                          "(or TVM's strings: 'llvm', 'llvm -mcpu=...', 'cuda -arch=sm_90')")
    attrs: dict[str, str] = {}
    for word in words[1:]:
        key, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or not key or not eq or not value:
            raise TargetError(f"target {text!r}: {word!r} is not an attribute; write -key=value "
                              f"(e.g. {'-mcpu=znver3' if kind == 'cpu' else '-arch=sm_90'})")
        if key not in TARGET_ATTRS[kind]:
            raise TargetError(f"target {text!r}: unknown attribute -{key} for a {kind} target; tdsl understands "
                              + ", ".join(f"-{k}" for k in TARGET_ATTRS[kind]))
        if key in attrs and attrs[key] != value:
            raise TargetError(f"target {text!r}: -{key} is given twice ({attrs[key]!r} and {value!r})")
        attrs[key] = value
    return Target(kind, tuple(attrs.items()))


def check_host_target(target) -> None:
    """Code built for a CPU target must run on this machine (tdsl does not cross-compile): its
    -mtriple must be the host's and every CPU feature it may use (`cpu_features`) the host's
    too. AVX2 code on an AVX-512 host is fine; a TargetError names the features this CPU lacks."""
    tgt = cpu_target(target)
    if tgt.kind != "cpu":
        return
    mtriple = tgt.get("mtriple")
    if mtriple is not None and mtriple != host_triple():
        raise TargetError(f"target {str(tgt)!r}: tdsl compiles for the host ({host_triple()}), not for "
                          f"-mtriple={mtriple}; drop -mtriple to build for this machine")
    missing = sorted(cpu_features(tgt) - host_features())
    refused = [f for f in missing if f.startswith("amx-") and _host_cpu()[1].get(f)]
    if refused:
        raise TargetError(f"target {str(tgt)!r} may use the CPU features {', '.join(refused)}: this CPU has them, but "
                          "the operating system did not let this process use AMX's tile data (Linux 5.16 or later "
                          "grants it on arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); build with "
                          f"-mattr=-amx-tile (the VNNI / AVX512-BF16 kernels)")
    if missing:
        covered = [name for name, feats in KNOWN_CPUS.items() if feats <= host_features()]
        raise TargetError(f"target {str(tgt)!r} may use the CPU features {', '.join(missing)}, which this CPU "
                          f"({host_cpu_name()}) lacks; tdsl runs what it builds here and does not cross-compile: "
                          f"build for this CPU (-mcpu=native) or one it covers ({', '.join(covered) or 'none known'}; "
                          f"or -mattr=-{missing[0]})")


def check_cpu_options(options: dict) -> dict:
    """The CPU build options, validated; an unknown one is a TargetError naming the known ones."""
    unknown = sorted(set(options) - set(CPU_OPTIONS))
    if unknown:
        raise TargetError(f"unknown build option(s) {', '.join(map(repr, unknown))} for target 'cpu'; "
                          f"known options: {', '.join(CPU_OPTIONS)}")
    return {"bounds_check": bool(options.get("bounds_check", False))}


# the host CPU ----------------------------------------------------------------------------------

@functools.cache
def _host_cpu() -> tuple[str, dict[str, bool], str]:
    """(CPU name, feature -> on, LLVM's feature string), asked of LLVM once per process."""
    from llvmlite import binding as llvm

    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features()
    return llvm.get_host_cpu_name(), {k: bool(feats[k]) for k in feats}, feats.flatten()


@functools.cache
def host_triple() -> str:
    """The host's target triple as LLVM names it (e.g. "x86_64-unknown-linux-gnu")."""
    from llvmlite import binding as llvm

    return llvm.get_process_triple()


def host_cpu_name() -> str:
    """The host CPU as LLVM names it (e.g. "znver3", "skylake-avx512")."""
    return _host_cpu()[0]


@functools.cache
def host_features() -> frozenset[str]:
    """The host CPU's features as LLVM names them (e.g. "avx512f", "avxvnni"); asked of LLVM once
    per process (every build of a tensorized function checks them). AMX's (amx-tile, amx-int8,
    ...) only when the operating system lets this process use the tile data (`amx_permitted`)."""
    have = frozenset(k for k, on in _host_cpu()[1].items() if on)
    if "amx-tile" in have and not amx_permitted():
        have = frozenset(f for f in have if not f.startswith("amx-"))
    return have


ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA, SYS_ARCH_PRCTL = 0x1023, 18, 158


@functools.cache
def amx_permitted() -> bool:
    """Whether this process may run AMX instructions: Linux (5.16 and later) gives a process the
    tile data state only when asked (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); asked
    once per process. The permission covers every thread and is inherited by forked children; an
    older kernel, another OS or a refusal gives False (and the host then offers no amx-* feature)."""
    import ctypes
    import platform
    import sys

    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def host_feature_string() -> str:
    """The host CPU's features as one LLVM attribute string ("+avx2,-avx512f,..."; AMX's off
    where this process may not use it)."""
    have = host_features()
    return ",".join(f if not f.startswith("+amx-") or f[1:] in have else "-" + f[1:]
                    for f in _host_cpu()[2].split(","))


# the CPU a target builds for -------------------------------------------------------------------

CPU_TARGET_ENV = "TDSL_CPU_TARGET"
"""An environment variable: a CPU target string (e.g. "llvm -mcpu=x86-64-v3") that a "cpu" target
without -mcpu means (its -mattr applies on top). Unset or empty: the host CPU. .ci/run sets it to
check the AVX2 code paths on an AVX-512 host."""

X86_64_BASELINE = frozenset(("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2"))
"""What every x86-64 CPU has and the calling convention needs: -mattr cannot take it away."""
_V2 = tuple(sorted(X86_64_BASELINE)) + ("cx16", "popcnt", "sahf", "sse3", "ssse3",
       "sse4.1", "sse4.2", "crc32")
_V3 = _V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = _V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
_HASWELL = _V3 + ("aes", "pclmul", "rdrnd", "fsgsbase", "xsaveopt")
_SKX = _V4 + _HASWELL[len(_V3):] + ("adx", "rdseed", "clflushopt", "clwb", "xsavec", "xsaves", "prfchw")
_ICX = _SKX + ("avx512vnni", "avx512ifma", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq",
               "gfni", "vaes", "vpclmulqdq", "sha", "rdpid")
_SPR = _ICX + ("avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "amx-int8", "amx-bf16", "serialize")
_ZEN3 = _HASWELL + ("adx", "rdseed", "clflushopt", "clwb", "xsavec", "xsaves", "prfchw", "sha", "vaes",
                    "vpclmulqdq", "rdpid")
_ZEN4 = _ZEN3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512vnni", "avx512ifma",
                 "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq", "avx512bf16", "gfni")
_ZEN5 = _ZEN4 + ("avxvnni", "avx512vp2intersect", "movdiri", "movdir64b")

KNOWN_CPUS: dict[str, frozenset[str]] = {name: frozenset(feats) for name, feats in {
    "x86-64-v2": _V2, "x86-64-v3": _V3, "x86-64-v4": _V4, "haswell": _HASWELL, "skylake-avx512": _SKX,
    "icelake-server": _ICX, "sapphirerapids": _SPR, "znver3": _ZEN3, "znver4": _ZEN4, "znver5": _ZEN5,
}.items()}
"""The CPUs `-mcpu=` may name (besides "native" and the host's own name) and the features
(LLVM's names) tdsl lets code built for them use: the instruction sets that matter for
computing, common to Intel and AMD (AMD-only ones such as sse4a are left out, so that code
built for -mcpu=znver3 also runs on an Intel host with AVX2)."""

# feature -> the features it needs (LLVM's implications); every other "avx512*" / "avx10.*" needs avx512f
_REQUIRES: dict[str, tuple[str, ...]] = {
    "sse2": ("sse",), "sse3": ("sse2",), "ssse3": ("sse3",), "sse4.1": ("ssse3",), "sse4.2": ("sse4.1",),
    "avx": ("sse4.2",), "avx2": ("avx",), "fma": ("avx",), "f16c": ("avx",), "avx512f": ("avx2", "fma", "f16c"),
    "avxvnni": ("avx2",), "avxifma": ("avx2",), "avxvnniint8": ("avx2",), "avxvnniint16": ("avx2",),
    "avxneconvert": ("avx2",), "vaes": ("aes", "avx"), "vpclmulqdq": ("pclmul", "avx"), "gfni": ("sse2",),
    "avx512bw": ("avx512f",), "avx512bf16": ("avx512bw",), "avx512vbmi": ("avx512bw",),
    "avx512vbmi2": ("avx512bw",), "avx512bitalg": ("avx512bw",),
    "avx512fp16": ("avx512bw", "avx512dq", "avx512vl"), "avx10.1": ("avx512fp16", "avx512bf16"),
    "avx10.2": ("avx10.1",), "amx-int8": ("amx-tile",), "amx-bf16": ("amx-tile",), "amx-fp16": ("amx-tile",),
    "amx-complex": ("amx-tile",), "amx-avx512": ("amx-tile", "avx10.2"),
}


def _needs(feature: str) -> tuple[str, ...]:
    if feature in _REQUIRES:
        return _REQUIRES[feature]
    return ("avx512f",) if feature.startswith("avx512") and feature != "avx512f" else ()


def _with(features: set[str], name: str) -> None:
    """Add `name` and everything it needs."""
    stack = [name]
    while stack:
        f = stack.pop()
        if f not in features:
            features.add(f)
            stack.extend(_needs(f))


def _without(features: set[str], name: str) -> None:
    """Remove `name` and every feature that needs it (directly or not): -avx2 drops avx512* and avxvnni."""
    gone = {name}
    changed = True
    while changed:
        changed = False
        for f in list(features):
            if f not in gone and any(n in gone for n in _needs(f)):
                gone.add(f)
                changed = True
    features.difference_update(gone)


def cpu_target(target) -> Target:
    """The Target a build for `target` compiles for: a "cpu" target without -mcpu means the one in
    $TDSL_CPU_TARGET when that is set (the target's own -mattr then applies on top of it's);
    anything else is `target` parsed."""
    tgt = parse_target(target)
    if tgt.kind != "cpu" or tgt.get("mcpu") is not None:
        return tgt
    default = _env_target(os.environ.get(CPU_TARGET_ENV, "").strip())
    if default is None:
        return tgt
    attrs = dict(default.attrs)
    for key, value in tgt.attrs:
        attrs[key] = f"{attrs['mattr']},{value}" if key == "mattr" and "mattr" in attrs else value
    return Target("cpu", tuple(attrs.items()))


@functools.cache
def _env_target(text: str) -> Target | None:
    if not text:
        return None
    try:
        tgt = _parse_string(text)
    except TargetError as exc:
        raise TargetError(f"${CPU_TARGET_ENV}={text!r} is not a CPU target: {exc}") from None
    if tgt.kind != "cpu":
        raise TargetError(f"${CPU_TARGET_ENV}={text!r} is not a CPU target; write e.g. 'llvm -mcpu=x86-64-v3'")
    return tgt


def cpu_name(target) -> str:
    """The CPU a "cpu" target builds for, as LLVM names it: its -mcpu, else the host's."""
    mcpu = cpu_target(target).get("mcpu")
    return host_cpu_name() if mcpu in (None, "native") else mcpu


def cpu_features(target) -> frozenset[str]:
    """The CPU features (LLVM's names: "avx2", "avx512f", "avx512vnni", "avxvnni", "avx512bf16",
    "f16c", ...) that code built for a "cpu" target may use: those of its -mcpu (KNOWN_CPUS; the
    host's without -mcpu or with -mcpu=native), changed by its -mattr=+f,-f with what they imply
    (+avx512vnni adds avx512f, avx2, ...; -avx512f drops every avx512* feature, -avx2 also
    avxvnni). Codegen, the intrinsics' choice and auto_schedule's rules all ask this."""
    tgt = cpu_target(target)
    return _features(tgt.get("mcpu"), tgt.get("mattr") or "")


@functools.cache
def _features(mcpu: str | None, mattr: str) -> frozenset[str]:
    if mcpu in (None, "native", host_cpu_name()):
        have = set(host_features())
    elif mcpu in KNOWN_CPUS:
        have = set(KNOWN_CPUS[mcpu])
    else:
        raise TargetError(f"unknown CPU -mcpu={mcpu}; tdsl knows {', '.join(KNOWN_CPUS)}, 'native' and this "
                          f"host's own name ({host_cpu_name()})")
    for item in mattr.split(","):
        name = item.strip().lstrip("+-")
        if not name:
            continue
        if not item.strip().startswith(("+", "-")):
            raise TargetError(f"-mattr={mattr}: write each feature as +name or -name (e.g. -mattr=-avx512f), "
                              f"not {item!r}")
        if name not in _llvm_feature_names() and name not in _REQUIRES:
            raise TargetError(f"-mattr={mattr}: unknown CPU feature {name!r} (LLVM's names: avx2, avx512f, "
                              "avx512vnni, avxvnni, avx512bf16, avx512fp16, f16c, fma, ...)")
        if item.strip().startswith("-"):
            gone = set(have)
            _without(have, name)
            if X86_64_BASELINE & (gone - have):
                raise TargetError(f"-mattr={mattr}: {item.strip()} would take away "
                                  f"{', '.join(sorted(X86_64_BASELINE & (gone - have)))}, which every x86-64 "
                                  "CPU has and its calling convention needs")
        else:
            _with(have, name)
    return frozenset(have)


def _llvm_feature_names() -> frozenset[str]:
    """Every feature name LLVM's host detection reports (on or off) for this architecture."""
    return frozenset(_host_cpu()[1])


def cpu_feature_string(target) -> str:
    """The LLVM feature string a target machine for `target` gets: every feature LLVM knows here,
    "+f" when `cpu_features(target)` has it, "-f" otherwise (the host's own string for the host)."""
    tgt = cpu_target(target)
    return _feature_string(tgt.get("mcpu"), tgt.get("mattr") or "")


@functools.cache
def _feature_string(mcpu: str | None, mattr: str) -> str:
    feats = _features(mcpu, mattr)
    if feats == host_features() and mcpu in (None, "native", host_cpu_name()):
        return host_feature_string()
    names = sorted(_llvm_feature_names() | feats)
    # the "+" first: a later "-f" also turns off what needs f, so LLVM never enables more than `feats`
    return ",".join([f"+{n}" for n in names if n in feats] + [f"-{n}" for n in names if n not in feats])
