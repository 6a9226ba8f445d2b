"""Precompute the hyperparameter surfaces of the ``real`` experiment (needs scikit-learn).

Writes ``src/ficbo/data/sklearn_grids.json``, which ships in the wheel, so that
``python -m ficbo.experiments.real`` runs without scikit-learn. Run from the repository root:

    OMP_NUM_THREADS=1 python packages/ficbo/scripts/make_real_grids.py

Each *family* is a scikit-learn model with two hyperparameters on one of scikit-learn's bundled
datasets; each family is evaluated on ``SPLITS`` random train/validation splits (70/30), every
split giving one *surface*: an 8 x 8 grid of hyperparameters (log-spaced where the range spans
decades), mapped to the unit square. Per grid point three numbers are stored:

- ``objective``: validation score of the model fitted on the full training split (accuracy,
  or R^2 for regression) -- the expensive black box;
- ``lowfi``: validation score of the same model fitted on a random 10% of the training split
  (stratified for classifiers) -- a cheap, naturally correlated low-fidelity source;
- ``heuristic``: the *training* score of that 10% fit -- a cheap and deliberately biased
  source: in-sample scores reward capacity, so they favour the over-fitting corner
  (large C / gamma, deep trees, one neighbour) that the validation score punishes.

Everything is seeded (split seed, subset seed, model seeds); the run is deterministic.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_wine
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestRegressor
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

GRID = 8
SPLITS = 3
LOWFI_FRACTION = 0.1
OUT = Path(__file__).resolve().parents[1] / "src" / "ficbo" / "data" / "sklearn_grids.json"


def _svc(u, v, n):
    return make_pipeline(StandardScaler(), SVC(C=10.0**u, gamma=10.0**v))


def _krr(u, v, n):
    return make_pipeline(StandardScaler(), KernelRidge(kernel="rbf", alpha=10.0**u, gamma=10.0**v))


def _hgb(u, v, n):
    return HistGradientBoostingClassifier(
        learning_rate=10.0**u, max_leaf_nodes=round(2.0**v), max_iter=50, early_stopping=False
    )


def _rf(u, v, n):
    return RandomForestRegressor(
        n_estimators=30, max_depth=round(2.0**u), max_features=v, random_state=0, n_jobs=1
    )


def _knn(u, v, n):
    # more neighbours than training points is undefined: cap at the training size
    return make_pipeline(
        StandardScaler(), KNeighborsClassifier(n_neighbors=min(round(10.0**u), n), p=v)
    )


#: name -> (loader, classifier?, model builder, (param names), (u range), (v range), log?)
FAMILIES = {
    "svc-digits": (load_digits, True, _svc, ("log10 C", "log10 gamma"), (-2, 4), (-5, 0)),
    "svc-breast-cancer": (
        load_breast_cancer,
        True,
        _svc,
        ("log10 C", "log10 gamma"),
        (-2, 4),
        (-5, 1),
    ),
    "krr-diabetes": (
        load_diabetes,
        False,
        _krr,
        ("log10 alpha", "log10 gamma"),
        (-4, 1),
        (-4, 0),
    ),
    "hgb-breast-cancer": (
        load_breast_cancer,
        True,
        _hgb,
        ("log10 learning_rate", "log2 max_leaf_nodes"),
        (-3, 0),
        (1, 6),
    ),
    "rf-diabetes": (
        load_diabetes,
        False,
        _rf,
        ("log2 max_depth", "max_features"),
        (0, 4.3),
        (0.1, 1.0),
    ),
    "knn-wine": (load_wine, True, _knn, ("log10 n_neighbors", "p"), (0, 1.7), (1.0, 4.0)),
}


def surface(name: str, split: int) -> dict:
    loader, is_clf, build, params, ur, vr = FAMILIES[name]
    x, y = loader(return_X_y=True)
    y = y.astype(float) if not is_clf else y
    strat = y if is_clf else None
    x_tr, x_va, y_tr, y_va = train_test_split(
        x, y, test_size=0.3, random_state=100 + split, stratify=strat
    )
    if not is_clf:  # kernel ridge has no intercept: centre the target on the training mean
        mu = y_tr.mean()
        y_tr, y_va = y_tr - mu, y_va - mu
    x_lo, _, y_lo, _ = train_test_split(
        x_tr,
        y_tr,
        train_size=LOWFI_FRACTION,
        random_state=200 + split,
        stratify=y_tr if is_clf else None,
    )
    us = np.linspace(*ur, GRID)
    vs = np.linspace(*vr, GRID)
    obj, lowfi, heur, unit = [], [], [], []
    for i, u in enumerate(us):
        for j, v in enumerate(vs):
            full = build(u, v, len(y_tr)).fit(x_tr, y_tr)
            low = build(u, v, len(y_lo)).fit(x_lo, y_lo)
            obj.append(full.score(x_va, y_va))
            lowfi.append(low.score(x_va, y_va))
            heur.append(low.score(x_lo, y_lo))
            unit.append([i / (GRID - 1), j / (GRID - 1)])
    for arr in (obj, lowfi, heur):
        if not all(math.isfinite(a) for a in arr):
            raise RuntimeError(f"{name} split {split}: non-finite score")
    return {
        "family": name,
        "split": split,
        "params": list(params),
        "u": us.round(6).tolist(),
        "v": vs.round(6).tolist(),
        "x": unit,
        "objective": [round(float(a), 6) for a in obj],
        "lowfi": [round(float(a), 6) for a in lowfi],
        "heuristic": [round(float(a), 6) for a in heur],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    surfaces = []
    for name in FAMILIES:
        for split in range(SPLITS):
            t = time.perf_counter()
            surfaces.append(surface(name, split))
            print(f"{name} split {split}: {time.perf_counter() - t:.1f} s", flush=True)
    import sklearn

    blob = {
        "about": (
            "Hyperparameter surfaces of scikit-learn models on its bundled datasets, made by "
            "packages/ficbo/scripts/make_real_grids.py (see its docstring)."
        ),
        "sklearn_version": sklearn.__version__,
        "grid": GRID,
        "lowfi_fraction": LOWFI_FRACTION,
        "surfaces": surfaces,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(blob, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
