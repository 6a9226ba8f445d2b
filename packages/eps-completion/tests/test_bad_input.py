"""Bad input: clear errors, never silent corruption."""

import math

import pytest
import torch

from eps_completion import EpsSensing, MatrixCompleter, bm_gd, observe, probe_rip, rgd

M = torch.arange(30.0, dtype=torch.float64).reshape(5, 6)
_I, _J = torch.meshgrid(torch.arange(5), torch.arange(6), indexing="ij")
MASK = (_I + 2 * _J) % 3 != 0  # every row and column observed


def test_mask_shape_mismatch():
    with pytest.raises(ValueError, match="does not match"):
        observe(M, MASK[:, :5])
    with pytest.raises(ValueError, match="does not match"):
        MatrixCompleter(1).fit(M, MASK.T)


@pytest.mark.parametrize("rank", [5, 6, 0, -1])
def test_rank_out_of_range(rank):
    with pytest.raises(ValueError, match="rank"):
        MatrixCompleter(max(rank, 1) if rank > 0 else rank).fit(M, MASK)


def test_factor_rank_below_rank_or_too_large():
    with pytest.raises(ValueError, match="factor_rank"):
        MatrixCompleter(2, factor_rank=1)
    with pytest.raises(ValueError, match="factor_rank"):
        MatrixCompleter(2, factor_rank=7).fit(M, MASK)


def test_empty_row_or_column():
    mask = MASK.clone()
    mask[2] = False
    with pytest.raises(ValueError, match=r"rows \[2\]"):
        observe(M, mask)
    mask = MASK.clone()
    mask[:, 4] = False
    with pytest.raises(ValueError, match=r"columns \[4\]"):
        MatrixCompleter(1).fit(M, mask)
    # documented behaviour when allowed: the surrogate fills the empty line with zeros
    mask = MASK.clone()
    mask[:, 4] = False
    x = MatrixCompleter(1, eps=0.1, allow_empty_lines=True).fit_transform(M, mask)
    assert float(x[:, 4].abs().max()) < 1e-6 * float(M.abs().max())


@pytest.mark.parametrize("eps", [0, 0.0, -1e-3, math.nan, math.inf, True, "0.1"])
def test_eps_must_be_positive_and_finite(eps):
    obs = observe(M, MASK)
    with pytest.raises(ValueError, match="eps"):
        EpsSensing(obs, eps)
    with pytest.raises(ValueError, match="eps"):
        MatrixCompleter(1, eps=eps)
    with pytest.raises(ValueError, match="eps"):
        bm_gd(obs, 1, eps)


def test_nan_in_observed_entries_but_not_in_unobserved():
    bad = M.clone()
    bad[0, 1] = math.nan  # observed
    with pytest.raises(ValueError, match=r"observed entry \(0, 1\) is nan"):
        observe(bad, MASK)
    bad[0, 1] = math.inf
    with pytest.raises(ValueError, match="finite"):
        MatrixCompleter(1).fit(bad, MASK)
    ok = M.clone()
    ok[0, 0] = math.nan  # unobserved: ignored
    obs = observe(ok, MASK)
    assert bool(torch.isfinite(obs.values).all())


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="mask"):
        observe(M, MASK.to(torch.float64) * 2)
    with pytest.raises(ValueError, match="2-D"):
        observe(M.flatten(), MASK.flatten())
    with pytest.raises(ValueError, match="no entry"):
        observe(M, torch.zeros_like(MASK))
    with pytest.raises(ValueError, match="method"):
        MatrixCompleter(1, method="magic")
    with pytest.raises(RuntimeError, match="fit"):
        MatrixCompleter(1).transform()
    obs = observe(M, MASK)
    with pytest.raises(ValueError, match="weights"):
        EpsSensing(obs, 0.1, weights="gaussian")
    with pytest.raises(ValueError, match="factor rank"):
        rgd(obs, 0)
    with pytest.raises(ValueError, match="max_iter"):
        bm_gd(obs, 1, 0.1, max_iter=0)
    with pytest.raises(ValueError, match="rank"):
        probe_rip(EpsSensing(obs, 0.1), 9)
    with pytest.raises(ValueError, match="matrix"):
        EpsSensing(obs, 0.1).apply(torch.zeros(6, 5, dtype=torch.float64))
