"""The tuning database: workloads, records, best, export/import, two concurrent writer processes."""
import json
import os
import subprocess
import sys

import pytest

import tdsl
from tdsl import T
from tdsl.tuner.database import Database, Record, workload_key


@T.prim_func
def add_one(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            B[vi] = A[vi] + T.float32(1)


def _record(n, t=None, error=None):
    return Record(candidate=f"cand{n}", trace=json.dumps([[], []]), decisions={"1": n}, time=t,
                  times=[t] if t else [], error=error, build_time=0.1, features=[float(n), 1.0])


def test_records_best_and_round_trip(tmp_path):
    path = tmp_path / "t.db"
    with Database(path) as db:
        wl = db.workload(add_one, "cpu")
        assert db.workload(add_one, "cpu").id == wl.id
        assert wl.key == workload_key(tdsl.structural_hash(add_one), "cpu", wl.machine)
        assert db.add(wl, _record(1, 3e-3))
        assert db.add(wl, _record(2, 1e-3))
        assert db.add(wl, _record(3, error="wrong result: B differs"))
        assert db.add(wl, _record(4, 0.5e-3, error="crashed"))          # failed: never best
        assert not db.add(wl, _record(2, 1e-9))                          # the same candidate again
        assert db.best(wl).candidate == "cand2"
        assert [r.candidate for r in db.best(wl, k=5)] == ["cand2", "cand1"]
        assert [r.ok for r in db.records(wl)] == [True, True, False, False]
        assert db.records(wl)[0].features == [1.0, 1.0]
        other = db.workload(add_one, "cpu", machine="another-machine")
        assert other.id != wl.id and db.best(other) is None
        assert db.export_jsonl(tmp_path / "r.jsonl") == 4
    with Database(tmp_path / "copy.db") as copy:
        assert copy.import_jsonl(tmp_path / "r.jsonl") == 4
        assert copy.import_jsonl(tmp_path / "r.jsonl") == 0            # already there
        wl2 = copy.workload(add_one, "cpu", create=False)
        assert wl2 is not None and copy.best(wl2).candidate == "cand2"
        assert copy.best(wl2).decisions == {"1": 2}


def test_import_rejects_a_bad_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"candidate": "x"}\n')
    with Database(tmp_path / "t.db") as db, pytest.raises(ValueError, match="bad.jsonl:1: not a tdsl tuning record"):
        db.import_jsonl(tmp_path / "bad.jsonl")


WRITER = """
import json, sys
sys.path.insert(0, {tests!r})
from test_tuner_database import add_one, _record
from tdsl.tuner.database import Database
db = Database(sys.argv[1])
wl = db.workload(add_one, "cpu")
for n in range(int(sys.argv[2]), int(sys.argv[2]) + 40):
    db.add(wl, _record(n, 1e-3 * (n + 1)))
"""


def test_two_concurrent_writers(tmp_path):
    path = str(tmp_path / "shared.db")
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=os.path.dirname(__file__)))
    procs = [subprocess.Popen([sys.executable, str(script), path, str(start)], stderr=subprocess.PIPE)
             for start in (0, 1000)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
    with Database(path) as db:
        wl = db.workload(add_one, "cpu", create=False)
        assert db.count(wl) == 80
        assert db.best(wl).candidate == "cand0"
        assert len(db.workloads()) == 1


def test_the_latest_retiming_decides_the_best_and_survives_export(tmp_path):
    with Database(tmp_path / "t.db") as db:
        wl = db.workload(add_one, "cpu")
        for n, t in enumerate([1e-3, 2e-3, 3e-3, 4e-3]):
            db.add(wl, _record(n, t))
        db.add(wl, _record(9, error="wrong result"))
        assert db.best(wl).candidate == "cand0" and db.retimes(wl) == {}
        assert db.add_retimes(wl, {"cand0": (5e-3, [5e-3, 6e-3]), "cand2": (4e-3, [4e-3])}) == 1
        assert db.best(wl).candidate == "cand2"        # re-timed side by side, cand2 won
        assert [r.candidate for r in db.best(wl, k=4)] == ["cand2", "cand0", "cand1", "cand3"]
        assert db.add_retimes(wl, {"cand2": (3e-3, [3e-3]), "cand3": (2e-3, [2e-3])}) == 2
        assert db.best(wl).candidate == "cand3" and db.retimes(wl, session=1)["cand0"] == 5e-3
        db.export_jsonl(tmp_path / "r.jsonl")
    with Database(tmp_path / "copy.db") as copy:
        assert copy.import_jsonl(tmp_path / "r.jsonl") == 5
        wl = copy.workload(add_one, "cpu")
        assert copy.best(wl).candidate == "cand3" and copy.retimes(wl) == {"cand2": 3e-3, "cand3": 2e-3}


def test_a_database_held_by_another_process_is_waited_for_then_named(tmp_path):
    import sqlite3
    import threading
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError, match="held.db: database is locked.*another process holds"):
        Database(path, timeout=0.2)
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    with Database(path, timeout=10) as db:                 # waits for the holder, then opens
        assert db.workloads() == []
    holder.close()
