"""Regenerate ``src/gp_bts/data/svc_breast_cancer.csv`` (needs scikit-learn; not a runtime need).

    uv run --locked python packages/gp-bts/scripts/make_tabular.py

3-fold stratified cross-validated accuracy of ``make_pipeline(StandardScaler(), SVC(C, gamma))``
on scikit-learn's bundled breast-cancer data, over a 20 x 20 grid of ``log10 C`` in [-2, 3] and
``log10 gamma`` in [-5, 1]. Deterministic (SVC is deterministic; the folds are not shuffled).
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

OUT = Path(__file__).resolve().parents[1] / "src" / "gp_bts" / "data" / "svc_breast_cancer.csv"


def main() -> None:
    x, y = load_breast_cancer(return_X_y=True)
    cv = StratifiedKFold(n_splits=3, shuffle=False)
    lines = [
        "# 3-fold CV accuracy of StandardScaler+SVC(rbf) on sklearn breast_cancer; "
        "made by scripts/make_tabular.py",
        "log10_C,log10_gamma,cv_accuracy",
    ]
    for lc in np.linspace(-2, 3, 20):
        for lg in np.linspace(-5, 1, 20):
            model = make_pipeline(StandardScaler(), SVC(C=10**lc, gamma=10**lg))
            acc = cross_val_score(model, x, y, cv=cv).mean()
            lines.append(f"{lc:.6f},{lg:.6f},{acc:.10f}")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
