"""High-arity schemes pass their checker; the sampling model; the learner's bound."""

import numpy as np
import pytest

from learning_theory.bounds import high_arity_bound
from learning_theory.compression import IntervalScheme, ThresholdScheme
from learning_theory.high_arity import (
    BipartiteHalfplaneScheme,
    GridSample,
    HighArityCompressed,
    HighArityLearner,
    ProductConcept,
    ProductScheme,
    SumThreshold,
    SumThresholdScheme,
    check_high_arity_scheme,
    draw_grid,
    grid_labels,
    product_error,
)
from learning_theory.samplers import HIGH_ARITY, high_arity_sampler, high_arity_target


@pytest.mark.parametrize("name", HIGH_ARITY)
def test_high_arity_scheme_passes_checker(name):
    _, scheme, _ = high_arity_target(name, np.random.default_rng(0))
    n = 300 if name == "bipartite-halfplanes" else 1000
    rep = check_high_arity_scheme(scheme, high_arity_sampler(name, 7), n, seed=2)
    assert rep.ok, rep.failures[:1]
    assert 1 <= rep.max_kept <= scheme.size


def test_grid_labels_match_a_loop_over_tuples():
    rng = np.random.default_rng(1)
    pts = [rng.uniform(size=3), rng.uniform(size=4), rng.uniform(size=2)]
    f = SumThreshold(1.4)
    lab = grid_labels(f, pts)
    for i in range(3):
        for j in range(4):
            for k in range(2):
                assert lab[i, j, k] == int(pts[0][i] + pts[1][j] + pts[2][k] >= 1.4)


def test_subgrid_and_sample_validation():
    S = draw_grid(SumThreshold(1.0), [np.array([0.1, 0.5, 0.9]), np.array([0.2, 0.6])])
    sub = S.subgrid([(0, 2), (1,)])
    assert sub.labels.tolist() == [[0], [1]]
    with pytest.raises(ValueError, match="shape"):
        GridSample([np.zeros(2), np.zeros(3)], np.zeros((3, 2)))
    with pytest.raises(ValueError, match="0 or 1"):
        GridSample([np.zeros(1)], np.array([3]))
    with pytest.raises(ValueError, match="arity"):
        SumThresholdScheme(3).compress(S)


class _DropWitness(ProductScheme):
    """Keeps an interval's endpoints but forgets the other factor: the sub-grid has no positive."""

    def _compress(self, sample):
        c = super()._compress(sample)
        return HighArityCompressed((c.indices[0], ()), c.side)


def test_checker_fails_a_broken_high_arity_scheme():
    scheme = _DropWitness([IntervalScheme(), IntervalScheme()])
    rep = check_high_arity_scheme(scheme, high_arity_sampler("rectangles", 7), 200, seed=0)
    assert not rep.ok and "mislabels" in rep.failures[0]["reason"]


def test_unrealizable_grids_raise():
    # a "cross" (not a product set) for thresholds^2
    S = GridSample([np.array([0.2, 0.8]), np.array([0.2, 0.8])], np.array([[0, 1], [1, 1]]))
    with pytest.raises(ValueError, match="not realizable"):
        ProductScheme([ThresholdScheme(), ThresholdScheme()]).compress(S)
    # sums 0.4 (positive) < 1.0 (negative): no threshold on the sum
    S = GridSample([np.array([0.2, 0.5]), np.array([0.2, 0.5])], np.array([[1, 0], [0, 0]]))
    with pytest.raises(ValueError, match="not realizable"):
        SumThresholdScheme(2).compress(S)
    # XOR on the grid is not a halfplane
    S = GridSample([np.array([0.0, 1.0]), np.array([0.0, 1.0])], np.array([[1, 0], [0, 1]]))
    with pytest.raises(ValueError, match="not realizable"):
        BipartiteHalfplaneScheme().compress(S)


def test_sum_threshold_learner_error_is_the_exact_gap_and_within_the_bound():
    # k=2, U[0,1] factors: G(a) = P[x+y < a] = a^2/2 on [0,1], 1 - (2-a)^2/2 on [1,2], so
    # err = P[theta <= x+y < theta_hat] = G(theta_hat) - G(theta)
    rng = np.random.default_rng(5)
    learner = HighArityLearner(SumThresholdScheme(2))
    m, delta, theta = 25, 0.1, 0.6
    errs = []
    for _ in range(400):
        S = draw_grid(SumThreshold(theta), [rng.uniform(size=m), rng.uniform(size=m)])
        h = learner.fit(S)
        th = h.theta
        assert th >= theta

        def G(a):
            return a * a / 2 if a <= 1 else 1 - (2 - a) ** 2 / 2

        exact = G(th) - G(theta)
        mc = product_error(h, SumThreshold(theta), [lambda r, n: r.uniform(size=n)] * 2, rng, 40000)
        assert mc == pytest.approx(exact, abs=0.01)
        errs.append(exact)
    assert np.mean(np.array(errs) > learner.bound(m, delta)) <= delta
    assert learner.bound(m, delta) == high_arity_bound(m, 1, 2, delta)


def test_product_concept_and_learner_on_a_rectangle():
    f = ProductConcept([lambda x: (x > 0.2) & (x < 0.6), lambda x: x > 0.5])
    rng = np.random.default_rng(0)
    S = draw_grid(f, [rng.uniform(size=30), rng.uniform(size=30)])
    h = HighArityLearner(ProductScheme([IntervalScheme(), IntervalScheme()])).fit(S)
    assert (grid_labels(h, S.points) == S.labels).all()
