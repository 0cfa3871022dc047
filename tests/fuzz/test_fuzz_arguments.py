"""Argument fuzzing against built kernels, in a subprocess so that a crash is caught.

The worker (arg_worker.py) calls a few corpus kernels with corrupted arguments: wrong
dtypes, shapes, counts, keywords, strides, read-only and misaligned arrays, huge zero-stride
views, non-arrays, broken DLPack exporters, bad scalars, symbolic-dimension mismatches,
aliasing and left-out outputs. Every call must raise `tdsl.ArgumentError` or succeed with the
reference result; the process must survive all of them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from fuzz.fuzz_common import deep_factor, examples

WORKER = os.path.join(os.path.dirname(__file__), "arg_worker.py")

# Open findings (docs/reliability.md); checked by test_open_findings.py. Set TDSL_OPEN_FINDINGS=1
# to fail here too.


def _run_worker(seed: int, count: int) -> dict:
    proc = subprocess.run([sys.executable, WORKER, str(seed), str(count)], capture_output=True, text=True,
                          timeout=600, check=False, env=dict(os.environ))
    cases = [line for line in proc.stdout.splitlines() if line.startswith("CASE ")]
    assert proc.returncode == 0, (f"the argument worker died with code {proc.returncode} (seed {seed}) during "
                                  f"{cases[-1] if cases else 'the builds'}\n{proc.stderr[-3000:]}")
    summary = [line for line in proc.stdout.splitlines() if line.startswith("SUMMARY ")]
    assert summary, f"the worker printed no summary\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(summary[-1][len("SUMMARY "):])


def test_random_arguments_never_crash_nor_mislead():
    count = examples(800)
    seed = 0 if deep_factor() == 1 else int.from_bytes(os.urandom(4), "little")
    summary = _run_worker(seed, count)
    failures = summary["failures"]
    assert not failures, f"seed {seed}: {len(failures)} bad outcomes:\n" + "\n".join(failures[:30])
    stats = summary["stats"]
    # both outcomes must be exercised, or the worker tests nothing
    assert stats.get("ArgumentError", 0) > count // 4, stats
    assert stats.get("accepted", 0) > count // 5, stats
