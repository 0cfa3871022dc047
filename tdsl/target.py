"""Targets: which backend builds a function, with which options, and what the host CPU has.

A leaf module (it imports only tdsl.errors; llvmlite only when the host is first asked about),
so that lowering, the intrinsics and the LLVM backend share one answer.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .errors import TargetError

KNOWN_TARGETS = ("cpu", "cuda")
_ALIASES = {"cpu": "cpu", "llvm": "cpu", "host": "cpu", "cuda": "cuda", "gpu": "cuda", "nvidia": "cuda"}
CPU_OPTIONS = ("bounds_check",)


@dataclass(frozen=True)
class Target:
    """A build target: `kind` is "cpu" or "cuda"."""

    kind: str

    def __str__(self) -> str:
        return self.kind


def parse_target(target) -> Target:
    """Accept "cpu" (aliases "llvm", "host"), "cuda" (alias "gpu"), or a Target."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        kind = _ALIASES.get(target.strip().lower())
        if kind is not None:
            return Target(kind)
    raise TargetError(f"unknown target {target!r}; known targets: {', '.join(repr(t) for t in KNOWN_TARGETS)}")


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
    from llvmlite import binding as llvm

    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features()
    return llvm.get_host_cpu_name(), {k: bool(feats[k]) for k in feats}, feats.flatten()


def host_cpu_name() -> str:
    """The host CPU as LLVM names it (e.g. "znver3", "skylake-avx512")."""
    return _host_cpu()[0]


@functools.cache
def host_features() -> frozenset[str]:
    """The host CPU's features as LLVM names them (e.g. "avx512f", "avxvnni"); asked of LLVM once
    per process (every build of a tensorized function checks them)."""
    return frozenset(k for k, on in _host_cpu()[1].items() if on)


def host_feature_string() -> str:
    """The host CPU's features as one LLVM attribute string ("+avx2,-avx512f,...")."""
    return _host_cpu()[2]
