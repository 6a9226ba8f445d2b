r"""Coefficient tables for the Newton-Schulz iteration, and the Polar Express derivation.

One Newton-Schulz step with coefficients :math:`(a, b, c)` maps every singular value ``s`` of
the iterate to :math:`p(s) = as + bs^3 + cs^5`. A *table* is the sequence of quintics applied
step by step (the last one repeats when more steps are asked for) plus the *margin*: the input
is normalised to :math:`X_0 = G / (\|G\|_F \cdot \text{margin})`, which puts every singular value
in :math:`(0, 1/\text{margin}]`. The composition of the quintics should map that interval close
to 1.

Tables (:data:`NS_TABLES`; :func:`get_table` looks one up):

``"muon"``
    :math:`(3.4445, -4.7750, 2.0315)` repeated, margin 1, 5 steps: the quintic of
    ``torch.optim.Muon`` (K. Jordan et al.), found by a heuristic search for a steep slope at 0.
    It does not converge: singular values end anywhere in about :math:`[0.7, 1.2]`.

``"polar_express"``
    Polar Express (Amsel, Persson, Musco, Gower, arXiv:2505.16932, Algorithm 1 and
    Appendix G): step ``t`` uses the odd quintic that is minimax-optimal for the constant 1 on
    the interval :math:`[\ell_t, u_t]` the previous steps left the singular values in, starting
    from :math:`[10^{-3}, 1]`; each polynomial is evaluated as :math:`p(x/1.01)` (safety factor,
    all but the last, converged entry) and the input is normalised with margin 1.01. Greedy
    step-wise optimality makes the composition worst-case optimal on :math:`[\ell_0, 1]`
    (their Theorem 4.1). The numbers below are produced by :func:`polar_express_coefficients`
    (an independent implementation of the derivation; a test checks it reproduces them); they
    agree with the paper's published list to 1e-8 relative (the last entry is the converged
    Padé quintic :math:`(15, -10, 3)/8`, which the paper's list has exactly and the derivation
    here reaches to 5e-9).

``"rms5"``
    Five quintics tuned here for the *mean-square* (relative Frobenius) error rather than the
    worst case: the 15 coefficients minimise :math:`\int (f(x) - 1)^2\,d\mu(x)` for the
    composition ``f`` and ``x`` log-uniform on :math:`[3\cdot10^{-4}, 1]/1.01` (about the
    3.5 decades that five quintics can lift: their composite slope at 0 is about 1e3), subject
    to stability constraints on :math:`[0, 1]` modelled on Polar Express's: every step keeps
    :math:`p(x)/x \ge 0.11`; each polynomial, evaluated on 1% more than the range its input
    can reach, stays in :math:`[0, 2]` (the output step in :math:`[0, 1.13]`), so round-off
    just above the range (bfloat16) cannot grow into a blow-up. The constraints were quadratic
    penalties and hold to 1e-5. Started from Polar Express's first five steps, refined by
    Nelder-Mead and Powell searches (SciPy, offline). The objective drops from 0.0437 (Polar
    Express, 5 steps) to 0.0417, and on the float32 accuracy report it is slightly better than
    five-step Polar Express on all three matrices: at five steps Polar Express is nearly
    optimal already, which is why the default buys its accuracy with a sixth step instead. A
    sixth entry, the degree-5 Newton-Schulz (Padé) quintic :math:`(15, -10, 3)/8`, serves any
    further steps.

The default (:data:`DEFAULT_TABLE`, :data:`DEFAULT_STEPS`) is Polar Express with 6 steps: in the
float32 accuracy report (``benchmarks/accuracy_polar.py``) it is far below the five-step
Polar Express on Gaussian and 1/i spectra alike (0.067 vs 0.123 on a square Gaussian, 0.017 vs
0.144 on the 1/i spectrum), for one extra step: 20% more matmuls, which the SYRK kernels are
meant to win back on a GPU (up to 1.5x fewer flops per step).

Example:
    >>> get_table("muon")[0]
    (3.4445, -4.775, 2.0315)
    >>> len(coefficients_for("polar_express", 10))
    10
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "DEFAULT_STEPS",
    "DEFAULT_TABLE",
    "NS_TABLES",
    "NSTable",
    "coefficients_for",
    "get_table",
    "minimax_odd_quintic",
    "polar_express_coefficients",
    "table_info",
]

Quintic = tuple[float, float, float]

#: Lower-bound floor of Polar Express's derivation: the minimax problem is solved on
#: ``[max(l, cushion * u), u]`` so early polynomials never map any value in ``[0, u]`` close to
#: zero (loss of precision in bfloat16; the paper's Section 4.4, value from its Appendix G).
PE_CUSHION = 0.02407327424182761


def minimax_odd_quintic(l: float, u: float, *, max_iter: int = 100) -> Quintic:
    r"""The odd quintic :math:`p(x) = ax + bx^3 + cx^5` closest to 1 on :math:`[l, u]` (sup norm).

    By the equioscillation theorem the optimum's error :math:`1 - p` alternates in sign with
    equal size ``E`` at four points :math:`l < q < r < u` (three coefficients, so four
    alternation points), the interior two being the extrema of ``p``, i.e. the positive roots of
    :math:`p'(x) = a + 3bx^2 + 5cx^4`, a quadratic in :math:`x^2`. The Remez exchange here
    alternates: solve the 4x4 linear system for ``(a, b, c, E)`` given ``q, r``, then move
    ``q, r`` to the new extrema, until they stop moving. Near ``l = u`` the system is singular
    and the answer is the degree-5 Newton-Schulz (Padé) polynomial scaled to ``u``.

    Args:
        l: lower end, ``0 < l <= u``.
        u: upper end.
        max_iter: exchange iterations (it converges in well under 20).

    Returns:
        ``(a, b, c)``.

    Example:
        >>> a, b, c = minimax_odd_quintic(0.5, 1.0)
        >>> p = lambda x: a * x + b * x**3 + c * x**5
        >>> round(p(0.5) + p(1.0), 12), round(p(1.0) - 1, 4)  # p(l) = 1 - E, p(u) = 1 + E
        (2.0, 0.024)
    """
    if not (math.isfinite(l) and math.isfinite(u) and 0 < l <= u):
        raise ValueError(f"need 0 < l <= u (finite), got l={l!r}, u={u!r}")
    if l / u >= 1 - 5e-6:
        return (15 / 8) / u, (-10 / 8) / u**3, (3 / 8) / u**5
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    q, r = l + (u - l) / 4, l + 3 * (u - l) / 4
    a = b = c = float("nan")
    for _ in range(max_iter):
        pts = torch.tensor([l, q, r, u], dtype=torch.float64)
        M = torch.stack([pts, pts**3, pts**5, signs], dim=1)
        a, b, c, _E = torch.linalg.solve(M, torch.ones(4, dtype=torch.float64)).tolist()
        disc = 9 * b * b - 20 * a * c
        if not (disc > 0 and c != 0):
            raise RuntimeError(f"Remez exchange lost the alternation on [{l}, {u}]")
        root = math.sqrt(disc)
        q_new = math.sqrt((-3 * b - root) / (10 * c))
        r_new = math.sqrt((-3 * b + root) / (10 * c))
        done = abs(q_new - q) + abs(r_new - r) <= 1e-15 * u
        q, r = q_new, r_new
        if done:
            break
    return a, b, c


def polar_express_coefficients(
    l0: float = 1e-3,
    steps: int = 8,
    *,
    cushion: float = PE_CUSHION,
    safety: float = 1.01,
) -> list[Quintic]:
    r"""Derive the Polar Express sequence: greedy minimax quintics on a shrinking interval.

    Start with singular values in :math:`[\ell_0, 1]`. Step ``t`` takes the minimax quintic on
    :math:`[\max(\ell_t, \text{cushion}\cdot u_t), u_t]`, rescales it so that the image of
    :math:`[\ell_t, u_t]` is centred on 1 (the cushion would otherwise leave it off-centre),
    and moves to :math:`[\ell_{t+1}, u_{t+1}] = [p(\ell_t), 2 - p(\ell_t)]`. Finally each
    polynomial but the last becomes :math:`p(x/\text{safety})`, i.e.
    :math:`(a/s, b/s^3, c/s^5)`, so round-off slightly above :math:`u_t` cannot grow over steps.

    Args:
        l0: assumed lower bound of the normalised singular values.
        steps: number of polynomials.
        cushion: the floor ratio described above.
        safety: the safety factor ``s >= 1`` (1 disables it).

    Returns:
        ``steps`` tuples ``(a, b, c)``.

    Example:
        >>> round(polar_express_coefficients(1e-3, 1, safety=1.0)[0][0], 6)
        8.287212
    """
    if not (0 < l0 <= 1):
        raise ValueError(f"l0 must be in (0, 1], got {l0!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps!r}")
    if not (0 <= cushion < 1):
        raise ValueError(f"cushion must be in [0, 1), got {cushion!r}")
    if not safety >= 1:
        raise ValueError(f"safety must be >= 1, got {safety!r}")
    l, u = float(l0), 1.0
    raw: list[Quintic] = []
    for _ in range(steps):
        a, b, c = minimax_odd_quintic(max(l, cushion * u), u)
        pl = a * l + b * l**3 + c * l**5
        pu = a * u + b * u**3 + c * u**5
        k = 2.0 / (pl + pu)
        raw.append((a * k, b * k, c * k))
        l = k * pl
        u = 2.0 - l
    s = float(safety)
    return [(a / s, b / s**3, c / s**5) for a, b, c in raw[:-1]] + [raw[-1]]


@dataclass(frozen=True)
class NSTable:
    """A named Newton-Schulz table.

    Attributes:
        name: registry key.
        coefficients: ``(a, b, c)`` per step; the last repeats beyond the table's length.
        margin: the input is normalised to ``G / (||G||_F * margin)``.
        default_steps: steps used when none are asked for.
        description: one line for reports.
    """

    name: str
    coefficients: tuple[Quintic, ...]
    margin: float
    default_steps: int
    description: str


_MUON = ((3.4445, -4.7750, 2.0315),)

# polar_express_coefficients(1e-3, 8), rounded to float64's repr.
_POLAR_EXPRESS = (
    (8.205160414005572, -22.90193498705604, 16.460724910180303),
    (4.066395159942769, -2.8611540867551377, 0.5183995226694732),
    (3.9095949044379164, -2.823351735039516, 0.5250369769390023),
    (3.2855640171986145, -2.4153019596359444, 0.48529406552790855),
    (2.2778732870839784, -1.619821765265441, 0.39848078704168316),
    (1.8725756512746539, -1.2307042574884348, 0.3585161620951192),
    (1.8564371097465522, -1.2132392819002782, 0.3567997894048351),
    (1.8749999980503391, -1.2499999961006782, 0.3749999980503392),
)

_RMS5 = (
    (8.26070160185588, -23.16123339406513, 16.537627885015613),
    (4.0774329694469795, -2.8629356187226715, 0.5164784372888074),
    (3.9298638901381446, -2.835435157980041, 0.5261752932817746),
    (3.3099403123084383, -2.434688497156113, 0.49187486026810545),
    (2.288961512375114, -1.6226221985789882, 0.395458418635487),
    # Beyond the five tuned steps: the converged Padé quintic, so extra steps polish.
    (1.875, -1.25, 0.375),
)

_TABLES: dict[str, NSTable] = {
    t.name: t
    for t in (
        NSTable("muon", _MUON, 1.0, 5, "torch.optim.Muon's quintic, repeated"),
        NSTable(
            "polar_express",
            _POLAR_EXPRESS,
            1.01,
            6,
            "Polar Express: greedy minimax quintics from [1e-3, 1], safety 1.01",
        ),
        NSTable("rms5", _RMS5, 1.01, 5, "five quintics tuned for the RMS error, log prior"),
    )
}

#: name -> coefficient list ``[(a, b, c), ...]`` (the last entry repeats for more steps).
NS_TABLES: dict[str, list[Quintic]] = {k: list(v.coefficients) for k, v in _TABLES.items()}

#: The table and step count :func:`shared_core.polar.msign` uses by default.
DEFAULT_TABLE = "polar_express"
DEFAULT_STEPS = _TABLES[DEFAULT_TABLE].default_steps


def table_info(name: str) -> NSTable:
    """The full record of a table (coefficients, margin, default steps).

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    try:
        return _TABLES[name]
    except (KeyError, TypeError):
        valid = ", ".join(repr(k) for k in _TABLES)
        raise ValueError(f"unknown Newton-Schulz table {name!r}; valid tables: {valid}") from None


def get_table(name: str) -> list[Quintic]:
    """The coefficient list of a named table.

    Args:
        name: one of :data:`NS_TABLES`.

    Returns:
        A fresh list of ``(a, b, c)`` tuples.

    Raises:
        ValueError: for an unknown name, listing the valid ones.

    Example:
        >>> [round(v, 6) for v in get_table("polar_express")[-1]]  # converged: Padé quintic
        [1.875, -1.25, 0.375]
    """
    return list(table_info(name).coefficients)


def coefficients_for(name: str, steps: int | None = None) -> list[Quintic]:
    """Exactly ``steps`` quintics of a table: truncated, or padded by repeating the last one.

    Args:
        name: table name.
        steps: number of steps (``None``: the table's default); ``>= 0``.

    Returns:
        A list of ``steps`` tuples.
    """
    info = table_info(name)
    if steps is None:
        steps = info.default_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    coeffs = list(info.coefficients[:steps])
    coeffs += [info.coefficients[-1]] * (steps - len(coeffs))
    return coeffs
