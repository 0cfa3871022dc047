"""`python -m tdsl` (the README's first command) runs the demo and checks itself."""
import os
import subprocess
import sys


def test_demo_runs_and_matches_numpy(tmp_path):
    env = dict(os.environ, TDSL_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "tdsl"], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "matches numpy: True" in proc.stdout
    assert 'sch.get_block("C")' in proc.stdout   # the trace was printed
    assert "T.parallel" in proc.stdout            # the IR was printed between steps
