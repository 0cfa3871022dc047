"""What a profiler would say about a CUDA build, without a GPU: `kernel.stats`.

* From the CUBIN (NVIDIA's ``cuobjdump``, from the pip wheel ``nvidia-cuda-cuobjdump`` or the
  PATH): per kernel the registers, spill stack, shared and local memory the assembler gave it,
  and the SASS instruction counts (``opcodes``: HMMA, LDSM, LDGSTS, LDL/STL ...).
* From an emulated run (``emulate=True``): per global buffer the warp requests and their
  32-byte sectors against the ideal (coalescing); per shared array the ldmatrix instructions, their
  shared-memory phases and wavefronts (a phase of 8 rows x 16 bytes takes 1 wavefront when its
  32 words fall in 32 different banks, n when one bank holds n different words), counted in
  the kernel's first (ascending-order) run of the last call.

    >>> k = tdsl.build(sch, target="cuda", emulate=True); k(a, b)
    >>> print(k.stats)
    shared array  ldmatrix  phases  wavefronts  worst  (line)
    A_shared            16      64         256  4-way  (41)
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field


def cuobjdump_path() -> str | None:
    """NVIDIA's cuobjdump: the pip wheel's (nvidia-cuda-cuobjdump) or the one on the PATH."""
    try:
        import nvidia
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        for sub in ("cu13/bin", "cu12/bin", "cuda_cuobjdump/bin"):
            path = os.path.join(root, sub, "cuobjdump")
            if os.path.exists(path):
                return path
    return shutil.which("cuobjdump")


def _cuobjdump(cubin: bytes, flag: str) -> str | None:
    tool = cuobjdump_path()
    if tool is None or not cubin:
        return None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        done = subprocess.run([tool, flag, path], capture_output=True, text=True, timeout=120)
    return done.stdout if done.returncode == 0 else None


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]] | None:
    """Per kernel {"registers", "stack", "shared", "local"} bytes/counts from ``cuobjdump
    -res-usage``; None without cuobjdump."""
    text = _cuobjdump(cubin, "-res-usage")
    if text is None:
        return None
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        if name and "REG:" in line:
            fields = dict(re.findall(r"(\w+):(\d+)", line))
            out[name] = {"registers": int(fields.get("REG", 0)), "stack": int(fields.get("STACK", 0)),
                         "shared": int(fields.get("SHARED", 0)), "local": int(fields.get("LOCAL", 0))}
    return out


def opcodes(cubin: bytes) -> Counter | None:
    """SASS instruction counts (full opcode with modifiers, e.g. "HMMA.16816.F32") from
    ``cuobjdump -sass``; None without cuobjdump."""
    text = _cuobjdump(cubin, "-sass")
    if text is None:
        return None
    out: Counter = Counter()
    for line in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            out[m.group(1)] += 1
    return out


@dataclass
class SharedCounter:
    """One shared array's ldmatrix traffic in an emulated run."""

    kernel: str
    buffer: str
    instructions: int
    phases: int
    wavefronts: int
    worst: int            # the worst n-way conflict of one phase
    line: int | None = None   # the line of kernel.source that issues the first ldmatrix from it

    @property
    def conflicted(self) -> bool:
        return self.wavefronts > self.phases


@dataclass
class GlobalCounter:
    """One global buffer's warp requests in an emulated run: the k-th access of each lane of a
    warp is one request; `sectors` the 32-byte sectors they touched, `ideal` the sectors their
    distinct bytes would fill if contiguous; `unpaired` accesses of lanes that made more
    accesses than the warp's shortest lane (divergence), not in the figures."""

    kernel: str
    buffer: str
    requests: int
    sectors: int
    ideal: int
    unpaired: int = 0

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def coalesced(self) -> bool:
        return self.sectors <= 1.25 * self.ideal


@dataclass
class KernelStats:
    """`kernel.stats`: the CUBIN's resources (None: no CUBIN or no cuobjdump) and the emulator's
    shared-memory counters (empty before an emulated call)."""

    resources: dict[str, dict[str, int]] | None = None
    shared: list[SharedCounter] = field(default_factory=list)
    global_: list[GlobalCounter] = field(default_factory=list)

    def notes(self) -> list[str]:
        out = []
        for c in self.shared:
            if c.conflicted:
                where = f" at line {c.line}" if c.line else ""
                out.append(f"{c.worst}-way bank conflicts on {c.buffer}{where} of kernel {c.kernel}: ldmatrix "
                           f"takes {c.wavefronts / c.phases:.2f} wavefronts per phase (ideal 1); swizzle or pad "
                           "its rows")
        for g in self.global_:
            if not g.coalesced:
                out.append(f"uncoalesced accesses to {g.buffer} in kernel {g.kernel}: {g.sectors_per_request:.1f} "
                           f"32-byte sectors per warp request, {g.ideal / g.requests:.1f} if the same bytes were "
                           "contiguous")
        for name, r in (self.resources or {}).items():
            if r["local"] or r["stack"]:
                out.append(f"kernel {name} uses {r['local']} bytes of local memory and {r['stack']} of stack "
                           "(register spills or arrays indexed at run time)")
        return out

    def __str__(self) -> str:
        lines = []
        if self.resources:
            lines.append(f"{'kernel':24} {'registers':>9} {'shared':>7} {'dynamic':>7} {'local':>6} {'stack':>6}")
            for name, r in self.resources.items():
                lines.append(f"{name:24} {r['registers']:>9} {r['shared']:>7} {r.get('dynamic_shared', 0):>7} "
                             f"{r['local']:>6} {r['stack']:>6}")
        if self.shared:
            lines.append(f"{'shared array':24} {'ldmatrix':>9} {'phases':>7} {'wavefronts':>10} {'worst':>6}  line")
            for c in self.shared:
                lines.append(f"{c.buffer:24} {c.instructions:>9} {c.phases:>7} {c.wavefronts:>10} "
                             f"{str(c.worst) + '-way':>6}  {c.line or ''}")
        if self.global_:
            lines.append(f"{'global buffer':24} {'requests':>9} {'sectors/request':>15} {'ideal':>6}")
            for g in self.global_:
                lines.append(f"{g.buffer:24} {g.requests:>9} {g.sectors_per_request:>15.2f} "
                             f"{g.ideal / g.requests if g.requests else 0:>6.2f}")
        return "\n".join(lines) if lines else "(no figures: no CUBIN with cuobjdump, and no emulated call yet)"


def parse_bank_report(kernel: str, text: str, source: str) -> list[SharedCounter]:
    """The emulator's report lines ("name instructions phases wavefronts worst") with the line of
    `source` of the first ldmatrix call that names the array."""
    out = []
    lines = source.splitlines()
    for row in text.splitlines():
        parts = row.split()
        if len(parts) != 5:
            continue
        name = parts[0]
        line = next((i + 1 for i, s in enumerate(lines) if "tdsl_mma_ldmatrix" in s and f" {name}[" in s), None)
        instructions, phases, wavefronts, worst = map(int, parts[1:])
        out.append(SharedCounter(kernel, name, instructions, phases, wavefronts, worst, line))
    return out


def parse_global_report(kernel: str, text: str) -> list[GlobalCounter]:
    """The emulator's lines "name requests sectors ideal unpaired"."""
    out = []
    for row in text.splitlines():
        parts = row.split()
        if len(parts) == 5:
            requests, sectors, ideal, unpaired = map(int, parts[1:])
            out.append(GlobalCounter(kernel, parts[0], requests, sectors, ideal, unpaired))
    return out
