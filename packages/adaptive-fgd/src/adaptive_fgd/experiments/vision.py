r"""vision: fitting an image as a function :math:`[-1,1]^2 \to R^3` by adaptive FGD vs a SIREN.

Task (fixed before any run): scikit-learn's bundled ``china.jpg`` (no download), the crop
rows 100-355, columns 200-455, average-pooled 4x to 64x64 (quick: 8x to 32x32), RGB in [0, 1].
Pixel centres :math:`x \in [-1,1]^2`. A random 75 % of the pixels is the training sample, the
other 25 % the test pixels (the fit must interpolate: an inpainting-type generalisation test).
Loss: :math:`\frac1{2n}\sum_i\|f(x_i) - y_i\|^2` (3 outputs). Metric: test PSNR
:math:`= -10\log_{10}\mathrm{MSE}`.

Methods, all from :math:`f = 0`, CPU time of their own steps at one thread:

* **adaptive FGD**: :class:`~adaptive_fgd.AdaptiveFGD`, :class:`~adaptive_fgd.KernelCentres`
  with :math:`\ell` = 1.5 pixel spacings, cap 1024 (quick 512), :math:`\delta = 0.3`, 30 steps,
  ``on_cap="record"``;
* **fixed FGD** at sizes 128, 512 and the cap (same family, fit and step);
* **SIREN** (2 -> 128 -> 128 -> 3, :math:`\sin(30\,\cdot)` first layer, :math:`\sin` hidden,
  the SIREN initialisation), full-batch Adam, lr 1e-3, for 10 s of CPU (quick 4 s).

**Neural representation row** (added in a later session, before its first run; the rule is
unchanged): adaptive FGD with :class:`~adaptive_fgd.NeuralFeatures` (tanh units trained on the
residual by variable projection, 300 Adam steps per growth, ``scale`` 10 for pixel-scale detail,
the same cap and settings), reported, not ranked.

Rule (written before the recorded runs; no exploratory run of this experiment preceded it). The
claim **holds** iff adaptive FGD's final test PSNR is at least the SIREN's test PSNR at the same
CPU time as adaptive FGD's total (the SIREN's last evaluation at or before it), **and** at least
every fixed-size FGD's final test PSNR minus 0.1 dB.
"""

from __future__ import annotations

import math
import time

import torch

from shared_core.experiment import ExperimentResult, RunContext, line_plot, progress, run_experiment

from ..fgd import AdaptiveFGD
from ..neural import NeuralFeatures
from ..representations import KernelCentres

DELTA = 0.3
STEPS = 30


def load_image(pool: int) -> torch.Tensor:
    """The crop of ``china.jpg``, pooled by ``pool``, as ``(H, W, 3)`` float64 in [0, 1]."""
    from sklearn.datasets import load_sample_image

    crop = load_sample_image("china.jpg")[100:356, 200:456].copy()
    img = torch.as_tensor(crop, dtype=torch.float64) / 255
    img = img.permute(2, 0, 1)[None]
    return torch.nn.functional.avg_pool2d(img, pool)[0].permute(1, 2, 0)


def pixel_grid(h: int, w: int) -> torch.Tensor:
    """Pixel centres in :math:`[-1, 1]^2`, ``(h * w, 2)``, row major."""
    ys = (torch.arange(h, dtype=torch.float64) + 0.5) / h * 2 - 1
    xs = (torch.arange(w, dtype=torch.float64) + 0.5) / w * 2 - 1
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([xx.ravel(), yy.ravel()], dim=1)


def psnr(pred: torch.Tensor, target: torch.Tensor) -> float:
    """:math:`-10\\log_{10}` of the mean squared error (signal range 1)."""
    return -10 * math.log10(float(((pred - target) ** 2).mean()))


class Siren(torch.nn.Module):
    """A small SIREN: sine activations, the first layer scaled by ``omega``."""

    def __init__(self, width: int = 128, omega: float = 30.0) -> None:
        super().__init__()
        self.omega = omega
        self.l1 = torch.nn.Linear(2, width)
        self.l2 = torch.nn.Linear(width, width)
        self.l3 = torch.nn.Linear(width, 3)
        with torch.no_grad():
            self.l1.weight.uniform_(-1 / 2, 1 / 2)
            for lin in (self.l2, self.l3):
                bound = math.sqrt(6 / lin.in_features) / omega
                lin.weight.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sin(self.omega * self.l1(x))
        h = torch.sin(self.omega * self.l2(h))
        return self.l3(h)


def run(ctx: RunContext) -> ExperimentResult:
    torch.set_num_threads(1)
    pool = 8 if ctx.quick else 4
    cap = 512 if ctx.quick else 1024
    budget = 4.0 if ctx.quick else 10.0
    img = load_image(pool)
    h, w, _ = img.shape
    x, y = pixel_grid(h, w), img.reshape(-1, 3)
    gen = torch.Generator().manual_seed(ctx.seed)
    perm = torch.randperm(x.shape[0], generator=gen)
    n_tr = int(0.75 * x.shape[0])
    tr, te = perm[:n_tr], perm[n_tr:]
    bw = 1.5 * 2 / max(h, w)
    sizes = sorted({128, 512, cap})
    methods = ["adaptive", "adaptive-neural", *[f"fixed-{m}" for m in sizes], "siren"]
    curves = {}
    for k in progress(methods, desc="vision"):
        rows = []
        if k == "siren":
            torch.manual_seed(ctx.seed)
            net = Siren().double()
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            cpu = 0.0
            while cpu < budget:
                t0 = time.process_time()
                for _ in range(10):
                    opt.zero_grad()
                    loss = 0.5 * ((net(x[tr]) - y[tr]) ** 2).sum(1).mean()
                    loss.backward()
                    opt.step()
                cpu += time.process_time() - t0
                with torch.no_grad():
                    rows.append({"seconds": cpu, "psnr": psnr(net(x[te]), y[te]), "size": 0})
        else:
            adaptive = k.startswith("adaptive")
            m = 8 if adaptive else int(k.split("-")[1])
            if k == "adaptive-neural":
                fam = NeuralFeatures(2, cap=cap, scale=10.0, seed=ctx.seed)
            else:
                fam = KernelCentres(2, bw, cap=cap if adaptive else m)
            fgd = AdaptiveFGD(
                fam,
                delta=DELTA,
                start_size=m,
                adaptive=adaptive,
                on_cap="record",
                seed=ctx.seed,
            ).fit(x[tr], y[tr], steps=0)
            cpu = 0.0
            for _ in range(STEPS):
                t0 = time.process_time()
                rec = fgd.step()
                cpu += time.process_time() - t0
                rows.append(
                    {
                        "seconds": cpu,
                        "psnr": psnr(fgd.predict(x[te]), y[te]),
                        "size": rec.size,
                        "rel_error": rec.rel_error,
                        "met": rec.met,
                    }
                )
        curves[k] = rows

    ad = curves["adaptive"]
    t_ad = ad[-1]["seconds"]
    siren_at = [r["psnr"] for r in curves["siren"] if r["seconds"] <= t_ad]
    siren_same_time = siren_at[-1] if siren_at else -math.inf
    fixed_final = {k: curves[k][-1]["psnr"] for k in curves if k.startswith("fixed")}
    holds = ad[-1]["psnr"] >= siren_same_time and all(
        ad[-1]["psnr"] >= v - 0.1 for v in fixed_final.values()
    )
    line_plot(
        ctx.path("psnr_vs_time.png"),
        {
            k: ([r["seconds"] for r in rows], [r["psnr"] for r in rows])
            for k, rows in curves.items()
        },
        title=f"test PSNR vs CPU time ({h}x{w} image, 25% pixels held out)",
        xlabel="CPU seconds (1 thread)",
        ylabel="test PSNR [dB]",
        logx=True,
    )
    line_plot(
        ctx.path("relative_error.png"),
        {"held-out estimate": (list(range(len(ad))), [r["rel_error"] for r in ad])},
        title="achieved relative gradient error (adaptive FGD)",
        xlabel="step",
        ylabel="||g_hat - g|| / ||g||",
        hlines={"delta": DELTA},
    )
    table = [
        {
            "method": k,
            "final test PSNR [dB]": rows[-1]["psnr"],
            "CPU s": rows[-1]["seconds"],
            "final size": rows[-1]["size"]
            if k != "siren"
            else sum(p.numel() for p in Siren().parameters()),
        }
        for k, rows in curves.items()
    ]
    met = sum(r["met"] for r in ad)
    measured = (
        f"adaptive {ad[-1]['psnr']:.2f} dB in {t_ad:.2f}s (size {ad[-1]['size']}); SIREN "
        f"{siren_same_time:.2f} dB at that time, {curves['siren'][-1]['psnr']:.2f} dB after "
        f"{curves['siren'][-1]['seconds']:.1f}s; best fixed {max(fixed_final.values()):.2f} dB"
    )
    return ExperimentResult(
        title="image fitting: adaptive FGD vs fixed FGD and a SIREN",
        claim=(
            "Adaptive FGD fits the image to a higher PSNR than the neural baseline in the same "
            "time."
        ),
        summary=f"{h}x{w} crop of china.jpg, {n_tr} training pixels. {measured}. The held-out "
        f"condition was met on {met}/{len(ad)} steps (the rest: cap {cap} reached).",
        metrics={
            "adaptive_psnr": ad[-1]["psnr"],
            "adaptive_seconds": t_ad,
            "siren_psnr_same_time": siren_same_time,
            "siren_psnr_final": curves["siren"][-1]["psnr"],
            **{f"{k}_psnr": v for k, v in fixed_final.items()},
            "neural_psnr": curves["adaptive-neural"][-1]["psnr"],
            "neural_seconds": curves["adaptive-neural"][-1]["seconds"],
            "met_steps": met,
        },
        holds=holds,
        plots=["psnr_vs_time.png", "relative_error.png"],
        table=table,
        paper="P18",
        measured=measured,
    )


def main(argv=None):
    return run_experiment(run, name="adaptive-fgd.vision", description=__doc__, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
