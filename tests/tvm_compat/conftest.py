"""TVM's own TensorIR schedule tests (apache/tvm tests/python/s_tir/schedule), ported: each test
names the TVM test it comes from. The shared checks live in tests/schedule/sched_check.py."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "schedule"))
