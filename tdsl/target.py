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


def check_host_target(target: Target) -> None:
    """A CPU target's -mcpu/-mtriple/-mattr must describe this machine: tdsl compiles for the host
    (every feature it has) and does not cross-compile; a TargetError says what differs."""
    if target.kind != "cpu":
        return
    mcpu = target.get("mcpu")
    if mcpu is not None and mcpu not in ("native", host_cpu_name()):
        raise TargetError(f"target {str(target)!r}: tdsl compiles for the host CPU ({host_cpu_name()}), not "
                          f"for -mcpu={mcpu}; drop -mcpu (or write -mcpu=native) to build for this machine")
    mtriple = target.get("mtriple")
    if mtriple is not None and mtriple != host_triple():
        raise TargetError(f"target {str(target)!r}: tdsl compiles for the host ({host_triple()}), not for "
                          f"-mtriple={mtriple}; drop -mtriple to build for this machine")
    mattr = target.get("mattr")
    if mattr is not None:
        have = host_features()
        for item in mattr.split(","):
            name, wanted = item.lstrip("+-"), not item.startswith("-")
            if (name in have) != wanted:
                raise TargetError(f"target {str(target)!r}: -mattr={mattr} asks for {item!r}, but tdsl uses exactly "
                                  f"the host CPU's features ({name} is {'on' if name in have else 'off'} here); "
                                  "drop -mattr")


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
    per process (every build of a tensorized function checks them)."""
    return frozenset(k for k, on in _host_cpu()[1].items() if on)


def host_feature_string() -> str:
    """The host CPU's features as one LLVM attribute string ("+avx2,-avx512f,...")."""
    return _host_cpu()[2]


# the CPU a target builds for -------------------------------------------------------------------

def cpu_name(target) -> str:
    """The CPU a "cpu" target builds for, as LLVM names it: its -mcpu, else the host's."""
    mcpu = parse_target(target).get("mcpu")
    return host_cpu_name() if mcpu in (None, "native") else mcpu


def cpu_features(target) -> frozenset[str]:
    """The CPU features (LLVM's names: "avx2", "avx512f", "avx512vnni", "avxvnni", "avx512bf16",
    "f16c", ...) that code built for a "cpu" target may use: the host's, changed by the target's
    -mattr=+f,-f. Codegen, the intrinsics' choice and auto_schedule's rules all ask this."""
    tgt = parse_target(target)
    have = set(host_features())
    for item in (tgt.get("mattr") or "").split(","):
        if item:
            name = item.lstrip("+-")
            (have.discard if item.startswith("-") else have.add)(name)
    return frozenset(have)
