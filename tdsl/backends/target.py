"""Targets: which backend builds a function, and with which options."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TargetError

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
