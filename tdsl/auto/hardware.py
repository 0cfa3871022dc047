"""What the rules know about the machine: vector width, caches and cores (CPU), thread limits (CUDA).

The figures come from the CPU a "cpu" target builds for (its features: tdsl.target.cpu_features,
the host's or those of "llvm -mcpu=x86-64-v3" ...) and the host (cache sizes from
/sys/devices/system/cpu, the cores this process may run on), and from the
limits every CUDA GPU since sm_70 shares for target "cuda" (no GPU is needed to schedule for one),
with the shared memory a block of the named architecture may have (opt-in: 163 KiB on sm_80,
227 KiB on sm_90; 48 KiB when the target names no architecture or one tdsl does not know).
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
    max_threads: threads per CUDA block; max_shared: shared memory bytes per CUDA block (the
    arch's opt-in limit: more than 48 KiB is dynamic shared memory);
    warp: threads per warp; features: the CPU features code may use (LLVM's names); target: the
    CPU target string ("cpu", "cpu -mcpu=x86-64-v3"); arch: the CUDA architecture a "cuda" target
    names ("cuda -arch=sm_90a" -> "sm_90a"; "" when it names none)."""

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
    target: str = "cpu"
    arch: str = ""

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
def _cpu(target: str) -> Hardware:
    """The Hardware of the (resolved) CPU target `target`."""
    from ..errors import TargetError
    from ..target import cpu_features

    try:
        from ..intrinsics import x86

        isas = x86.available(target)
        features = cpu_features(target)
    except TargetError:
        raise
    except Exception:  # noqa: BLE001 - no llvmlite / not x86: plain vector loops, 4 lanes
        isas, features = [], frozenset()
    isa = "avx512" if "avx512" in isas else "avx2" if "avx2" in isas else ""
    lanes = 16 if isa == "avx512" else 8 if isa == "avx2" else 4
    return Hardware("cpu", isa=isa, lanes=lanes, cores=_cores(), l1=_cache_bytes(1, 32 * 1024),
                    l2=_cache_bytes(2, 512 * 1024), features=features, target=target)


def hardware(target) -> Hardware:
    """The Hardware of a target ("cpu", "cuda", a Target, or a Hardware, returned as is)."""
    if isinstance(target, Hardware):
        return target
    from ..target import cpu_target

    tgt = cpu_target(target)
    if tgt.kind == "cpu":
        return _cpu(str(tgt))
    from ..backends.cuda.shared_memory import STATIC_LIMIT, optin_limit

    arch = tgt.get("arch") or ""
    return Hardware("cuda", lanes=1, cores=1, arch=arch, target=str(tgt),
                    max_shared=optin_limit(arch) if arch else STATIC_LIMIT)
