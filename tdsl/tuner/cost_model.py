"""Cost models: predict how fast a candidate is from its features, trained online on measurements.

The target is a candidate's normalised throughput, `best time / time` (1 for the fastest so far,
0 for a failed candidate), as in MetaSchedule; higher predictions are better. Models:

* `LightGBMModel`: gradient-boosted trees from lightgbm (the `tune` extra); the default when
  lightgbm is installed.
* `NumpyGBDT`: the same idea in numpy alone (depth-limited regression trees on quantile
  thresholds, squared loss), the default without lightgbm.
* `RandomModel`: random scores, i.e. no model (random search, for comparisons).

    model = default_model()            # LightGBMModel or NumpyGBDT
    model.fit(X, y); model.predict(X)  # X: (n, len(FEATURE_NAMES)) floats
"""
from __future__ import annotations

from typing import Any

import numpy as np


def targets(times: list[float | None]) -> np.ndarray:
    """Normalised throughputs: best / time, 0 for failures (None)."""
    ok = [t for t in times if t]
    best = min(ok) if ok else 1.0
    return np.array([best / t if t else 0.0 for t in times], dtype=np.float64)


class CostModel:
    """Base: `fit(X, y)`, `predict(X)`; a model never fitted predicts zeros."""

    name = "none"
    fitted = False

    def fit(self, X, y) -> None:
        raise NotImplementedError

    def predict(self, X) -> np.ndarray:
        raise NotImplementedError


class RandomModel(CostModel):
    """No model: uniform random scores (random search)."""

    name = "random"

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    def fit(self, X, y) -> None:
        self.fitted = True

    def predict(self, X) -> np.ndarray:
        return self._rng.random(len(X))


class NumpyGBDT(CostModel):
    """Gradient-boosted regression trees in numpy: `rounds` trees of depth `depth`, shrinkage
    `learning_rate`, split thresholds at up to `bins` quantiles per feature."""

    name = "numpy-gbdt"

    def __init__(self, rounds: int = 60, depth: int = 3, learning_rate: float = 0.2, bins: int = 16,
                 min_leaf: int = 2):
        self.rounds, self.depth, self.lr, self.bins, self.min_leaf = rounds, depth, learning_rate, bins, min_leaf
        self._trees: list = []
        self._base = 0.0

    def fit(self, X, y) -> None:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self._base = float(y.mean()) if len(y) else 0.0
        pred = np.full(len(y), self._base)
        self._trees = []
        if len(y) >= 2 * self.min_leaf:
            # thresholds per feature, and each value's bin: bin b holds cuts[b-1] < x <= cuts[b]
            self._cuts = [np.unique(np.quantile(X[:, f], np.linspace(0, 1, self.bins + 2)[1:-1]))
                          for f in range(X.shape[1])]
            binned = np.stack([np.searchsorted(c, X[:, f], side="left") for f, c in enumerate(self._cuts)], 1)
            width = self.bins + 1
            flat = binned + np.arange(X.shape[1])[None, :] * width    # one bincount for all features
            for _ in range(self.rounds):
                tree = self._grow(flat, y - pred, np.arange(len(y)), self.depth, width, X.shape[1])
                self._trees.append(tree)
                pred += self.lr * self._apply(tree, X)
        self.fitted = True

    def _grow(self, flat, r, rows, depth, width, nfeat):
        value = float(r[rows].mean())
        if depth == 0 or len(rows) < 2 * self.min_leaf:
            return value
        sub = flat[rows]
        size = nfeat * width
        counts = np.bincount(sub.ravel(), minlength=size).reshape(nfeat, width)
        sums = np.bincount(sub.ravel(), weights=np.repeat(r[rows], nfeat), minlength=size).reshape(nfeat, width)
        nl, sl = np.cumsum(counts, 1)[:, :-1], np.cumsum(sums, 1)[:, :-1]   # left of cut b: bins 0..b
        n, total = len(rows), float(r[rows].sum())
        nr, sr = n - nl, total - sl
        okay = (nl >= self.min_leaf) & (nr >= self.min_leaf)
        for f, c in enumerate(self._cuts):
            okay[f, len(c):] = False
        if not okay.any():
            return value
        gain = np.where(okay, sl ** 2 / np.maximum(nl, 1) + sr ** 2 / np.maximum(nr, 1) - total ** 2 / n, -1.0)
        f, b = np.unravel_index(int(gain.argmax()), gain.shape)
        if gain[f, b] <= 1e-12:
            return value
        cut = float(self._cuts[f][b])
        mask = sub[:, f] - f * width <= b
        return (int(f), cut, self._grow(flat, r, rows[mask], depth - 1, width, nfeat),
                self._grow(flat, r, rows[~mask], depth - 1, width, nfeat))

    def _apply(self, tree, X) -> np.ndarray:
        if not isinstance(tree, tuple):
            return np.full(len(X), tree)
        f, cut, left, right = tree
        out = np.empty(len(X))
        mask = X[:, f] <= cut
        out[mask] = self._apply(left, X[mask])
        out[~mask] = self._apply(right, X[~mask])
        return out

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        pred = np.full(len(X), self._base)
        for tree in self._trees:
            pred += self.lr * self._apply(tree, X)
        return pred


class LightGBMModel(CostModel):
    """lightgbm's gradient-boosted trees (one thread: measurements run beside it)."""

    name = "lightgbm"

    def __init__(self, rounds: int = 80):
        import lightgbm  # noqa: F401 - fail here, not at the first fit

        self.rounds = rounds
        self._booster: Any = None  # a lightgbm.Booster once fitted

    def fit(self, X, y) -> None:
        import lightgbm

        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        params = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 15, "min_data_in_leaf": 2,
                  "min_data_in_bin": 1, "max_bin": 32, "num_threads": 1, "verbose": -1, "seed": 0,
                  "deterministic": True, "force_row_wise": True}
        self._booster = lightgbm.train(params, lightgbm.Dataset(X, y, params={"verbose": -1}),
                                       num_boost_round=self.rounds) if len(y) >= 4 else None
        self._mean = float(y.mean()) if len(y) else 0.0
        self.fitted = True

    def predict(self, X) -> np.ndarray:
        if self._booster is None:
            return np.full(len(X), getattr(self, "_mean", 0.0))
        return self._booster.predict(np.asarray(X, dtype=np.float64))


def default_model() -> CostModel:
    """lightgbm's model when lightgbm is installed (`pip install tdsl[tune]`), else NumpyGBDT."""
    try:
        return LightGBMModel()
    except ImportError:
        return NumpyGBDT()


def make_model(spec) -> CostModel:
    """A model from tune(cost_model=...): None/"auto", "lightgbm", "numpy", "random", or a CostModel."""
    if spec is None or spec == "auto":
        return default_model()
    if isinstance(spec, CostModel):
        return spec
    if spec == "lightgbm":
        try:
            return LightGBMModel()
        except ImportError:
            raise ImportError("cost_model='lightgbm' needs lightgbm: pip install 'tdsl[tune]' "
                              "(or pass cost_model='numpy')") from None
    if spec == "numpy":
        return NumpyGBDT()
    if spec == "random":
        return RandomModel()
    raise ValueError(f"cost_model={spec!r}: expected 'auto', 'lightgbm', 'numpy', 'random' or a CostModel")
