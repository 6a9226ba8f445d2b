"""The `lm` experiment's hookable attention, and the warning for matrices hooks cannot see."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from adaptive_lmo import AdaptiveLMO
from adaptive_lmo.experiments.lm import Block, CausalSelfAttention, TinyLM


def _brute_attention(att: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Causal multi-head attention written out position by position (float64 reference)."""
    B, T, d = x.shape
    h = att.heads
    dh = d // h
    W = {n: (getattr(att, n).weight, getattr(att, n).bias) for n in ("q", "k", "v", "out")}
    out = torch.zeros(B, T, d, dtype=x.dtype)
    for b in range(B):
        q = x[b] @ W["q"][0].T + W["q"][1]
        k = x[b] @ W["k"][0].T + W["k"][1]
        v = x[b] @ W["v"][0].T + W["v"][1]
        cat = torch.zeros(T, d, dtype=x.dtype)
        for head in range(h):
            sl = slice(head * dh, (head + 1) * dh)
            for t in range(T):
                scores = [float(q[t, sl] @ k[j, sl]) / math.sqrt(dh) for j in range(t + 1)]
                mx = max(scores)
                w = [math.exp(sc - mx) for sc in scores]
                z = sum(w)
                cat[t, sl] = sum((w[j] / z) * v[j, sl] for j in range(t + 1))
        out[b] = cat @ W["out"][0].T + W["out"][1]
    return out


def test_causal_attention_matches_a_position_by_position_reference():
    torch.manual_seed(3)
    att = CausalSelfAttention(12, 3).double()
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(att(x), _brute_attention(att, x), rtol=1e-10, atol=1e-12)
        # causality: changing the last position changes no earlier output
        x2 = x.clone()
        x2[:, -1] += 1.0
        torch.testing.assert_close(att(x2)[:, :-1], att(x)[:, :-1], rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="divisible"):
        CausalSelfAttention(10, 3)


def test_attention_init_matches_multihead_attention_distribution():
    torch.manual_seed(2)
    d = 150
    att = CausalSelfAttention(d, 3)
    mha = nn.MultiheadAttention(d, 3)
    bound = math.sqrt(6.0 / (4 * d))  # Xavier-uniform of a (3d, d) matrix
    mine = (att.q.weight, att.k.weight, att.v.weight)
    for w, ref in zip(mine, mha.in_proj_weight.detach().chunk(3), strict=True):
        w = w.detach()
        assert float(w.abs().max()) <= bound and float(ref.abs().max()) <= bound
        # uniform on [-b, b]: variance b^2 / 3; 22 500 entries, so a 3% band is > 5 sigma
        assert abs(float(w.var()) / (bound**2 / 3) - 1) < 0.03
        assert abs(float(ref.var()) / (bound**2 / 3) - 1) < 0.03
    for lin in (att.q, att.k, att.v, att.out):
        assert torch.count_nonzero(lin.bias) == 0
    assert torch.count_nonzero(mha.in_proj_bias) == 0


def test_block_equals_torch_transformer_encoder_layer_with_copied_weights():
    torch.manual_seed(5)
    d, heads, T = 10, 2, 9
    blk = Block(d, heads, 2 * d).double()
    ref = nn.TransformerEncoderLayer(
        d, heads, 2 * d, dropout=0.0, batch_first=True, norm_first=True
    ).double()
    with torch.no_grad():
        for p in blk.parameters():  # random norms too, so the copy is checked everywhere
            p.copy_(torch.randn_like(p) * 0.5)
        att = blk.attn
        ref.self_attn.in_proj_weight.copy_(torch.cat([att.q.weight, att.k.weight, att.v.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([att.q.bias, att.k.bias, att.v.bias]))
        ref.self_attn.out_proj.weight.copy_(att.out.weight)
        ref.self_attn.out_proj.bias.copy_(att.out.bias)
        for mine, theirs in (
            (blk.ln1, ref.norm1),
            (blk.ln2, ref.norm2),
            (blk.mlp_in, ref.linear1),
            (blk.mlp_out, ref.linear2),
        ):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
        ref.eval()  # the fast path and the slow path agree; eval avoids no behaviour here
        x = torch.randn(3, T, d, dtype=torch.float64)
        mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
        torch.testing.assert_close(blk(x), ref(x, src_mask=mask), rtol=1e-10, atol=1e-12)


def _train(model, opt, steps, V, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, V, (6, T), generator=g)
        y = torch.randint(0, V, (6, T), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1)).backward()
        opt.step()


def test_every_attention_and_mlp_matrix_of_the_lm_gets_the_criterion():
    torch.manual_seed(0)
    V, T = 7, 6
    model = TinyLM(V, T, 12, layers=2, heads=3)
    opt = AdaptiveLMO(model, lr=0.02, update_every=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning may be raised
        _train(model, opt, 5, V, T)
    geo = opt.geometry()
    want = {
        f"blocks.{i}.{m}.weight"
        for i in range(2)
        for m in ("attn.q", "attn.k", "attn.v", "attn.out", "mlp_in", "mlp_out")
    }
    assert set(geo) == want
    for name, g in geo.items():
        # the criterion decided: it chose, or kept the exponent when a change was not resolved
        assert g["source"].startswith(("criterion", "kept: a = ")), (name, g["source"])
        assert 0.0 <= g["exponent"] <= 1.0
    routing = opt.routing()
    assert {n for n, a in routing.items() if a == "lmo"} == want
    assert routing["tok.weight"] == routing["pos.weight"] == routing["head.weight"] == "adamw"


class _MHAModel(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.fc = nn.Linear(d, d)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        a, _ = self.attn(x, x, x, need_weights=False)
        return self.head(torch.tanh(self.fc(a)))


def test_weights_used_functionally_warn_once_naming_them_and_fall_back():
    torch.manual_seed(1)
    model = _MHAModel(6)
    opt = AdaptiveLMO(model, lr=0.02, update_every=1, fallback_exponent=0.25)
    x, y = torch.randn(4, 5, 6), torch.randn(4, 5, 1)
    caught = []
    for _ in range(4):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            opt.step()
        caught += [str(m.message) for m in w if issubclass(m.category, UserWarning)]
    assert len(caught) == 1, caught  # once, on the first criterion step (step 2), for both
    msg = caught[0]
    assert "2 matrix parameter(s)" in msg
    assert "'attn.in_proj_weight' (no forward hook can see" in msg
    assert "'attn.out_proj.weight' (hooked, but no activations recorded yet" in msg
    assert "fc.weight" not in msg and "record_activations" in msg
    geo = opt.geometry()
    for name in ("attn.in_proj_weight", "attn.out_proj.weight"):
        assert geo[name]["exponent"] == 0.25 and geo[name]["source"].startswith("fallback")
    assert geo["fc.weight"]["source"].startswith("criterion")


def test_one_step_check_rows_and_real_decrease():
    """`lm.one_step_check`: well-formed rows, and its real decrease is the best of an explicit
    step-size scan of the validation loss."""
    from adaptive_lmo.experiments import lm

    cfg = {"V": 6, "T": 5, "n": 64, "d": 8, "layers": 1, "batch": 8}
    rows = lm.one_step_check(cfg, lr=0.05, seeds=1, at=(10,), grid=3, etas=6)
    want = {f"blocks.0.{m}.weight" for m in ("attn.q", "attn.k", "attn.v", "attn.out")}
    want |= {"blocks.0.mlp_in.weight", "blocks.0.mlp_out.weight"}
    assert {r["layer"] for r in rows} == want
    for r in rows:
        assert r["a_best"] in (0.0, 0.5, 1.0) and 0.0 <= r["a_crit"] <= 1.0
        assert 0.0 <= r["a0_over_best"] <= 1.0 + 1e-12
        assert r["crit_over_best"] >= 0.0
    with pytest.raises(ValueError, match="multiples"):
        lm.one_step_check(cfg, at=(15,))
    # _real_decrease against a hand scan on a tiny model
    torch.manual_seed(4)
    model = lm.TinyLM(5, 4, 6, 1).double()
    x, y = torch.randint(0, 5, (3, 4)), torch.randint(0, 5, (3, 4))
    p = model.blocks[0].attn.v.weight
    D = torch.randn_like(p)
    etas = [0.01, 0.1, 0.3, 1.0]
    with torch.no_grad():
        L0 = float(lm.lm_loss(model(x), y))
        w0 = p.clone()
        scan = []
        for e in etas:
            p.copy_(w0 - e * D)
            scan.append(L0 - float(lm.lm_loss(model(x), y)))
        p.copy_(w0)
    best, k = lm._real_decrease(model, p, D, (x, y), etas)
    assert best == pytest.approx(max(0.0, *scan), abs=1e-15)
    assert k == (scan.index(max(scan)) if max(scan) > 0 else -1)
    torch.testing.assert_close(p.detach(), w0, rtol=0, atol=0)  # weights restored


def test_fixed_exponents_pin_some_matrices_and_leave_the_rest_on_auto():
    torch.manual_seed(6)
    V, T = 7, 5
    model = TinyLM(V, T, 9, layers=1, heads=3).double()
    pin = lambda n, p, m: 0.0 if ".attn." in n else None  # noqa: E731
    opt = AdaptiveLMO(model, lr=0.03, update_every=2, fixed_exponents=pin)
    blk = model.blocks[0]
    assert all(len(getattr(blk.attn, k)._forward_hooks) == 0 for k in ("q", "k", "v", "out"))
    assert len(blk.mlp_in._forward_hooks) == 1 and len(blk.mlp_out._forward_hooks) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(model, opt, 4, V, T)
    for name, g in opt.geometry().items():
        if ".attn." in name:
            assert g["exponent"] == 0.0 and g["source"] == "fixed"
        else:
            assert g["source"].startswith("criterion")


def test_fixed_exponents_by_name_take_the_pinned_step():
    torch.manual_seed(7)
    V, T, lr, mu = 6, 4, 0.04, 0.95
    model = TinyLM(V, T, 8, layers=1, heads=2).double()
    name = "blocks.0.attn.v.weight"
    opt = AdaptiveLMO(model, lr=lr, momentum=mu, fixed_exponents={name: 0.5})
    p = model.blocks[0].attn.v.weight
    w0 = p.detach().clone()
    x, y = torch.randint(0, V, (5, T)), torch.randint(0, V, (5, T))
    F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1)).backward()
    g = p.grad.clone()
    opt.step()
    # first step, Nesterov: buffer = g, direction g + mu g; the 0.5 member of the family with
    # the polar factor's Frobenius norm, by a float64 SVD
    U, s, Vh = torch.linalg.svd(g * (1 + mu), full_matrices=False)
    # this gradient is rank 7 of 8 by structure (the LayerNorm'd inputs are mean-zero), its
    # 8th singular value round-off (~1e-18): the polar scale is the norm of msign's factor,
    # sqrt(numerical rank), with the rank cut at max(m, n) eps of the largest value
    keep = s > max(g.shape) * torch.finfo(s.dtype).eps * s[0]
    D = U @ torch.diag(torch.where(keep, s**0.5, 0.0)) @ Vh
    D = D * math.sqrt(int(keep.sum())) / torch.linalg.norm(D)
    torch.testing.assert_close(p.detach(), w0 - lr * D, rtol=1e-10, atol=1e-12)
    assert opt.geometry()[name]["exponent"] == 0.5
    assert opt.geometry()[name]["source"] == "fixed"


@pytest.mark.parametrize(
    ("arg", "match"),
    [
        ({"nope.weight": 0.0}, "not matrix parameters"),
        ({"blocks.0.attn.q.weight": 1.5}, r"fixed_exponents\['blocks.0.attn.q.weight'\]"),
        (lambda n, p, m: -0.1, "fixed_exponents"),
        (3, "mapping, a callable or None"),
    ],
)
def test_fixed_exponents_bad_input(arg, match):
    model = TinyLM(5, 4, 6, 1)
    with pytest.raises(ValueError, match=match):
        AdaptiveLMO(model, fixed_exponents=arg)


def test_fixed_exponents_need_the_module():
    model = TinyLM(5, 4, 6, 1)
    with pytest.raises(ValueError, match=r"nn\.Module"):
        AdaptiveLMO(model.parameters(), exponent=0.5, fixed_exponents={"x": 0.0})


def test_lm_text_configs_make_one_pass_over_their_windows():
    # the rule fixed before the quick and default runs: n = steps * batch in every mode
    from adaptive_lmo.experiments import lm

    for cfg in (lm.config(True), lm.config(False), lm.config(False, full=True)):
        assert cfg["corpus"] == "text"
        assert cfg["n"] == cfg["steps"] * cfg["batch"]
        data, _ = lm.make_text_corpus(cfg["T"], 64, 0, n_eval=cfg["n_eval"])
        assert data["val"][0].shape == data["test"][0].shape == (cfg["n_eval"], cfg["T"])
