"""The Dask path: a LocalCluster of 2 worker processes builds and measures through
client.get_executor(); every record carries the workers' machine (this machine here)."""
import pytest

import tdsl
from tdsl.tuner.database import Database
from tdsl.tuner.machine import fingerprint

distributed = pytest.importorskip("distributed")

from test_tuner_tune import mm, space


def _has_measured() -> bool:
    from tdsl.tuner import runner

    return runner._RUNNER is not None


def test_tune_on_a_local_dask_cluster(tmp_path):
    # death_timeout: a worker process may take minutes to start on a loaded 2-core machine
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None, death_timeout=300) as cluster, \
            distributed.Client(cluster, timeout=300) as client:
        result = tdsl.tune(mm, trials=2, space=space, batch=2, executor=client.get_executor(), verbose=0,
                           database=tmp_path / "d.db")
        measured_there = client.run(_has_measured)
    assert len(result.records) == 2 and result.best is not None
    assert result.stats["machines"] == [fingerprint()]
    assert len(measured_there) == 2 and any(measured_there.values())   # the workers measured
    with Database(tmp_path / "d.db") as db:
        (wl,) = db.workloads()
        assert wl.machine == fingerprint() and db.count(wl) == 2
