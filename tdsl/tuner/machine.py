"""The machine fingerprint: what a measured time depends on besides the program.

Records measured on different machines never mix: the fingerprint is part of the workload key.
It names the CPU (model name, LLVM's CPU name and feature string) and the cores this process may
run on; not the host name, so that identical machines of a cluster share their records.
"""
from __future__ import annotations

import functools
import hashlib
import os
import platform


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def describe() -> dict:
    """The parts of the fingerprint, readable."""
    from ..backends.llvm import jit

    built_for = jit.machine_for("cpu")   # the host's CPU, or $TDSL_CPU_TARGET's (tdsl.target.cpu_target)
    return {"cpu_model": _cpu_model(), "llvm_cpu": built_for.cpu, "features": built_for.features,
            "cores": cores(), "system": platform.system(), "arch": platform.machine()}


@functools.cache
def fingerprint() -> str:
    """A short stable id of this machine: `<llvm cpu>-<cores>c-<hash of everything>`."""
    d = describe()
    digest = hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:12]
    return f"{d['llvm_cpu']}-{d['cores']}c-{digest}"
