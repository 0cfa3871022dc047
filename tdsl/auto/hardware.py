"""What the rules know about the machine: vector width, caches and cores (CPU), thread limits (CUDA).

The figures come from the host (CPU features through llvmlite, cache sizes from
/sys/devices/system/cpu, the cores this process may run on) for target "cpu", and from the
limits every CUDA GPU since sm_70 shares for target "cuda" (no GPU is needed to schedule for one).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Hardware:
    """The numbers the rules' defaults depend on.

    kind: "cpu" or "cuda"; isa: "avx512" / "avx2" / "" (no fp32 micro-kernel); lanes: fp32 lanes
    of a vector register; cores: cores this process may use; l1 / l2: data cache bytes per core;
    max_threads: threads per CUDA block; max_shared: shared memory bytes per CUDA block;
    warp: threads per warp; features: the CPU features (LLVM names) code for the target may use."""

    kind: str
    isa: str = ""
    lanes: int = 8
    cores: int = 1
    l1: int = 32 * 1024
    l2: int = 512 * 1024
    max_threads: int = 1024
    max_shared: int = 48 * 1024
    warp: int = 32
    features: frozenset[str] = frozenset()

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"


def _cache_bytes(level: int, default: int) -> int:
    """The size of the level-`level` data (or unified) cache of cpu0, from sysfs."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("index"):
                continue
            path = os.path.join(base, entry)
            with open(os.path.join(path, "level")) as fh:
                if int(fh.read()) != level:
                    continue
            with open(os.path.join(path, "type")) as fh:
                if fh.read().strip() == "Instruction":
                    continue
            with open(os.path.join(path, "size")) as fh:
                text = fh.read().strip().upper()
            scale = 1024 * 1024 if text.endswith("M") else 1024 if text.endswith("K") else 1
            return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@cache
def _host_cpu() -> Hardware:
    try:
        from ..intrinsics import x86

        isas = x86.available()
    except Exception:  # noqa: BLE001 - no llvmlite / not x86: plain vector loops, 4 lanes
        isas = []
    isa = "avx512" if "avx512" in isas else "avx2" if "avx2" in isas else ""
    lanes = 16 if isa == "avx512" else 8 if isa == "avx2" else 4
    try:
        from ..target import host_features

        features = host_features()
    except Exception:  # noqa: BLE001 - no llvmlite
        features = frozenset()
    return Hardware("cpu", isa=isa, lanes=lanes, cores=_cores(), l1=_cache_bytes(1, 32 * 1024),
                    l2=_cache_bytes(2, 512 * 1024), features=features)


def hardware(target) -> Hardware:
    """The Hardware of a target ("cpu", "cuda", a Target, or a Hardware, returned as is)."""
    if isinstance(target, Hardware):
        return target
    from ..target import parse_target

    kind = parse_target(target).kind
    if kind != "cpu":
        return Hardware("cuda", lanes=1, cores=1)
    host = _host_cpu()
    if parse_target(target).get("mattr") is None:
        return host
    from dataclasses import replace

    from ..target import cpu_features

    return replace(host, features=cpu_features(target))
