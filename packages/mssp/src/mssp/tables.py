r"""Parameterisations as data: SP, muP and MSSP for SGD and Adam in the three MoE regimes.

Every rule is a monomial in the size ratios to a base model,

.. math:: n = N/N_0,\quad e = N_e/N_{e,0},\quad m = M/M_0,\quad k = K/K_0,\quad l = L/L_0,

written as a dict of exponents, e.g. ``{"N": -1, "K": -0.5}`` for :math:`n^{-1} k^{-1/2}`.
For each tensor role (``embed``, ``router``, ``w1``, ``w2``, ``readout``) a :class:`Rule`
gives three monomials: the init std (a factor on PyTorch's ``fan_in**-0.5``), the forward
multiplier, and the learning-rate factor (on the base learning rate). Two scalars complete a
scheme: the aggregation multiplier :math:`\alpha_{agg}` and the residual-branch multiplier
:math:`\beta`.

Regimes (which ratios may differ from 1): ``"I"`` co-scales :math:`N \asymp N_e`; ``"II"``
co-scales :math:`N \asymp M \asymp K`; ``"III"`` co-scales all four. Depth ``L`` may change in
every regime.

Where the exponents come from (see the README, "The math in brief", for the derivation):

* Width (``N``, ``N_e``) and the embedding/readout: Tensor Programs V (Yang et al. 2022,
  Table 3) as implemented by the ``mup`` package (``MuReadout`` 1/width multiplier; Adam: lr
  of a matrix-like tensor over its fan-in ratio; SGD: lr of a vector-like tensor times its
  width ratio). The expert down/up projections are treated as one hidden matrix of fan-out
  :math:`K N_e` (the active experts), so they are matrix-like in all three regimes.
* Depth: depth-muP (Yang et al. 2023, "Tensor Programs VI"; Bordelon et al. 2023):
  :math:`\beta = l^{-1/2}`, Adam lr of block weights :math:`\times\, l^{-1/2}`, SGD lr unchanged.
* Experts/sparsity (``K``): this package's own derivation of the two aggregation choices the
  source paper (arXiv 2605.14200) contrasts. muP keeps the aggregated output
  :math:`\Theta(1)` at initialisation, :math:`\alpha_{agg} = k^{1/2}` (the ``K`` independent
  expert outputs average to :math:`K^{-1/2}`), which forces every expert's and the router's
  updates down by :math:`k^{-1/2}` (their ``K`` coherent contributions are amplified by
  :math:`k^{1/2}`). MSSP aggregates as a gate-weighted mean, :math:`\alpha_{agg} = 1`: the
  random initial output vanishes as :math:`K^{-1/2}` while every expert and the router keep
  :math:`\Theta(1)` updates. The paper's own tables could not be read from the public text
  available to this package; these exponents are a reconstruction, not a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "DIMS",
    "EXPECTED",
    "OPTIMIZERS",
    "REGIMES",
    "ROLES",
    "SCHEMES",
    "Rule",
    "Scheme",
    "get_scheme",
    "monomial",
    "table_markdown",
]

DIMS = ("N", "Ne", "M", "K", "L")
ROLES = ("embed", "router", "w1", "w2", "readout")
SCHEMES = ("sp", "mup", "mssp")
OPTIMIZERS = ("sgd", "adam")
#: the dimensions each regime co-scales (depth L may change in every regime).
REGIMES = MappingProxyType({"I": ("N", "Ne"), "II": ("N", "M", "K"), "III": ("N", "Ne", "M", "K")})


def _check_exps(exps: dict[str, float]) -> dict[str, float]:
    bad = sorted(set(exps) - set(DIMS))
    if bad:
        raise ValueError(f"unknown dimension(s) {bad}; dimensions are {DIMS}")
    return dict(exps)


def monomial(exps: dict[str, float], ratios: dict[str, float]) -> float:
    r""":math:`\prod_d \mathrm{ratios}[d]^{\mathrm{exps}[d]}`.

    Example:
        >>> monomial({"N": -1, "K": -0.5}, {"N": 4.0, "K": 4.0})
        0.125
    """
    out = 1.0
    for d, a in _check_exps(exps).items():
        if d not in ratios:
            raise ValueError(f"ratio of dimension {d!r} missing from {sorted(ratios)}")
        out *= float(ratios[d]) ** a
    return out


@dataclass(frozen=True)
class Rule:
    """Init-std, multiplier and learning-rate monomials of one tensor role."""

    init: dict[str, float] = field(default_factory=dict)
    mult: dict[str, float] = field(default_factory=dict)
    lr: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("init", "mult", "lr"):
            _check_exps(getattr(self, name))


@dataclass(frozen=True)
class Scheme:
    """A complete parameterisation: a :class:`Rule` per role plus the two scalar multipliers."""

    name: str
    optimizer: str
    regime: str
    rules: dict[str, Rule]
    aggregate: dict[str, float]
    branch: dict[str, float]


_EMPTY = Rule()


def _mup_like(optimizer: str, regime: str, k_exp: float) -> tuple[dict[str, Rule], dict]:
    """muP (``k_exp = -1/2``) and MSSP (``k_exp = 0``) rules; see the module docstring."""
    m_scaled = "M" in REGIMES[regime]
    if optimizer == "adam":
        depth = {"L": -0.5}
        router = (
            Rule(mult={}, lr={"N": -1, "K": k_exp, **depth})
            if m_scaled
            else Rule(init={"N": 0.5}, mult={"N": -1}, lr={"K": k_exp, **depth})
        )
        rules = {
            "embed": Rule(),
            "router": router,
            "w1": Rule(lr={"N": -1, "K": k_exp, **depth}),
            "w2": Rule(lr={"Ne": -1, "K": k_exp, **depth}),
            "readout": Rule(init={"N": 0.5}, mult={"N": -1}),
        }
    else:  # sgd: the K exponent of the expert/router lrs is 0 under muP, 1 under MSSP
        kk = 1.0 + 2.0 * k_exp
        router = (
            Rule(lr={"N": -1, "K": kk})
            if m_scaled
            else Rule(init={"N": 0.5}, mult={"N": -1}, lr={"N": 1})
        )
        rules = {
            "embed": Rule(lr={"N": 1}),
            "router": router,
            "w1": Rule(lr={"N": -0.5, "Ne": 0.5, "K": kk}),
            "w2": Rule(lr={"N": 1, "Ne": -1, "K": kk}),
            "readout": Rule(init={"N": 0.5}, mult={"N": -1}, lr={"N": 1}),
        }
    aggregate = {"K": -k_exp} if k_exp else {}
    return rules, aggregate


def get_scheme(scheme: str, optimizer: str, regime: str) -> Scheme:
    """The parameterisation ``scheme`` for ``optimizer`` in ``regime``.

    Args:
        scheme: ``"sp"``, ``"mup"`` or ``"mssp"``.
        optimizer: ``"sgd"`` or ``"adam"``.
        regime: ``"I"``, ``"II"`` or ``"III"``.

    Returns:
        A :class:`Scheme`.

    Example:
        >>> s = get_scheme("mup", "adam", "II")
        >>> s.aggregate, s.rules["w1"].lr
        ({'K': 0.5}, {'N': -1, 'K': -0.5, 'L': -0.5})
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {SCHEMES}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {OPTIMIZERS}")
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; choose one of {tuple(REGIMES)}")
    if scheme == "sp":
        return Scheme("sp", optimizer, regime, dict.fromkeys(ROLES, _EMPTY), {}, {})
    k_exp = -0.5 if scheme == "mup" else 0.0
    rules, aggregate = _mup_like(optimizer, regime, k_exp)
    return Scheme(scheme, optimizer, regime, rules, aggregate, {"L": -0.5})


#: predicted scaling exponents (in the regime's common ratio s, with every scaled dimension
#: proportional to s) of the observables of :mod:`mssp.observables` under muP and MSSP:
#: "combine0" = aggregated output at init, "du" = change of the expert pre-activations,
#: "dlogits" = change of the router logits, "dz" = change of the network output, "h" = the
#: residual stream. Used by the coordinate-check tests.
EXPECTED = MappingProxyType(
    {
        (scheme, regime): {
            "combine0": -0.5 if (scheme == "mssp" and "K" in dims) else 0.0,
            "du": -0.5 if (scheme == "mup" and "K" in dims) else 0.0,
            "dlogits": -0.5 if (scheme == "mup" and "K" in dims) else 0.0,
            "dz": 0.0,
            "h": 0.0,
        }
        for scheme in ("mup", "mssp")
        for regime, dims in REGIMES.items()
    }
)


def _fmt(exps: dict[str, float]) -> str:
    sym = {"N": "n", "Ne": "e", "M": "m", "K": "k", "L": "l"}
    parts = []
    for d in DIMS:
        a = exps.get(d, 0)
        if a:
            s = f"{a:g}" if a != int(a) else f"{int(a)}"
            parts.append(sym[d] if s == "1" else f"{sym[d]}^{s}")
    return " ".join(parts) or "1"


def table_markdown(optimizer: str, regime: str) -> str:
    """A markdown table of muP's and MSSP's init, multiplier and learning-rate monomials.

    (SP is all ones: init std ``fan_in**-0.5``, multipliers 1, one learning rate.)

    Example:
        >>> print(table_markdown("adam", "I").splitlines()[0])
        | tensor | muP init | muP mult | muP lr | MSSP init | MSSP mult | MSSP lr |
    """
    schemes = [get_scheme(s, optimizer, regime) for s in ("mup", "mssp")]
    head = "| tensor | muP init | muP mult | muP lr | MSSP init | MSSP mult | MSSP lr |"
    rows = [head, "|" + "---|" * 7]
    for role in ROLES:
        cells = [role]
        for s in schemes:
            r = s.rules[role]
            cells += [_fmt(r.init), _fmt(r.mult), _fmt(r.lr)]
        rows.append("| " + " | ".join(cells) + " |")
    for label, attr in (("aggregate", "aggregate"), ("branch", "branch")):
        cells = [label]
        for s in schemes:
            cells += ["-", _fmt(getattr(s, attr)), "-"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
