"""docs/gpu_pipelines.md, section "cp.async and software pipelining": its before/after example is
what tdsl prints today (the example runs; the IR after the pass and the CUDA kernel match)."""
import os
import re
import runpy

import numpy as np

import tdsl

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "gpu_pipelines.md")


def _section_blocks() -> list[str]:
    with open(DOC) as f:
        text = f.read()
    section = text.split("## cp.async and software pipelining", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:python|cuda)\n(.*?)\n```", section, re.S)


def test_before_after_example_is_what_tdsl_prints(tmp_path):
    before, after, cuda = _section_blocks()
    example = tmp_path / "example.py"   # a file: the parser reads the function's source
    example.write_text(before + "\n")
    scale = runpy.run_path(str(example))["scale"]
    stages = dict(tdsl.lower.stages(scale, target="cuda"))
    assert stages["inject_software_pipeline"].script().strip() == after.strip()
    kernel = tdsl.build(scale, target="cuda", emulate=True)
    assert kernel.source.split("#endif")[-1].strip() == cuda.strip()
    a = np.random.default_rng(0).standard_normal((8, 64)).astype("float32")
    np.testing.assert_array_equal(kernel(a), a[:, ::-1] * 2)
    b = np.zeros_like(a)
    tdsl.interpret(scale, a, b)
    np.testing.assert_array_equal(b, a[:, ::-1] * 2)
