"""Optional dependencies: import one, or raise an ``ImportError`` that names the extra."""

from __future__ import annotations

import importlib

__all__ = ["require"]

#: top-level module -> the ``grn-boost[...]`` extra that installs it
EXTRAS = {"xgboost": "xgboost", "lightgbm": "lightgbm", "catboost": "catboost", "sklearn": "native"}


def require(module: str):
    """Import an optional dependency, or raise ``ImportError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        extra = EXTRAS.get(module.split(".")[0], module)
        raise ImportError(
            f"this backend needs {module!r}: pip install 'grn-boost[{extra}]'"
        ) from err
