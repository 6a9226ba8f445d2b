"""Intrinsic Muon: LMO steps in the Riemannian geometry of fixed-rank (LoRA), SPD, Stiefel and
Grassmann manifolds."""

from importlib.metadata import PackageNotFoundError, version

from .lmo import (
    euclidean_lmo,
    fixed_rank_lift,
    fixed_rank_lmo,
    fixed_rank_lmo_of_blocks,
    fixed_rank_proju,
    fixed_rank_rgrad,
    grassmann_lmo,
    horizontal_part,
    horizontal_split,
    intrinsic_norm,
    spd_lift,
    spd_lmo,
    stiefel_lift,
    stiefel_lmo,
)
from .norms import block_lmo, block_norm, parse_norm
from .optim import IMuon, tag

try:
    __version__ = version("imuon")
except PackageNotFoundError:  # a source tree without metadata
    __version__ = "0.0.0"

__all__ = [
    "IMuon",
    "__version__",
    "block_lmo",
    "block_norm",
    "euclidean_lmo",
    "fixed_rank_lift",
    "fixed_rank_lmo",
    "fixed_rank_lmo_of_blocks",
    "fixed_rank_proju",
    "fixed_rank_rgrad",
    "grassmann_lmo",
    "horizontal_part",
    "horizontal_split",
    "intrinsic_norm",
    "parse_norm",
    "spd_lift",
    "spd_lmo",
    "stiefel_lift",
    "stiefel_lmo",
    "tag",
]
