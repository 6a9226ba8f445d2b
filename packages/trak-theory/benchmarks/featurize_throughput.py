"""Featurisation throughput: trak-theory vs traker 0.3.2 (and dattri 0.3) on the CPU.

Same model (the 4,810-parameter digits MLP), same examples, same k and batch size, same work
(per-example margin gradients, projection to k dims, reweighting terms; checked once per run:
traker's stored features against our gradients times traker's own sketch matrix). Each timed
call starts from a fresh store and pays for generating its sketch, as a fresh process would:
ours clears its process-wide sketch cache, traker builds its projector inside the call.

The baseline is traker's strongest CPU configuration: ``BasicProjector(block_size=k)``, one
(p, k) block generated once per call. traker's default (100-column blocks) regenerates the
whole sketch for every batch; its figure is kept beside, labelled as the default.

Storage is matched, in two settings:

- ``memory``: ours keeps the features in RAM (no ``save_dir``); traker can only write numpy
  memmaps, so its folder is on tmpfs (``/dev/shm``), the nearest it has to memory;
- ``disk``: both write memmaps into a folder on disk (``--disk-dir``, default the system temp
  folder; its file system is recorded). Ours flushes each block (that is what makes it
  resumable); traker writes into the page cache and flushes later.

dattri keeps its cache in memory and is timed in the ``memory`` setting only. Candidate and
baseline are interleaved by ``shared_core.bench.compare`` (all sizes and settings in one run);
the ratio is t_ours / t_baseline (< 1: ours faster; 1/ratio is the speed-up).

    python packages/trak-theory/benchmarks/featurize_throughput.py \
        --out packages/trak-theory/benchmarks/results/featurize_cpu.json    # n = 500 and 2,000
    python packages/trak-theory/benchmarks/featurize_throughput.py --quick  # n = 500, fewer pairs
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from shared_core.bench import compare, write_json
from trak_theory import TRAK
from trak_theory.gradients import per_example_grads
from trak_theory.projector import _cached_matrix

SHM = Path("/dev/shm")


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def fs_type(path: Path) -> str | None:
    """The file system holding ``path`` (longest mount prefix in /proc/mounts), or None."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    path, best = Path(path).resolve(), (-1, None)
    for line in mounts:
        parts = line.split()
        # a later mount of the same point hides an earlier one, hence >=
        if len(parts) >= 3 and path.is_relative_to(parts[1]) and len(parts[1]) >= best[0]:
            best = (len(parts[1]), parts[2])
    return best[1]


class Folders:
    """Fresh folders for each timed call under one parent, removed when the case is done
    (removing them inside the call would time the file system's unlink)."""

    def __init__(self, parent: Path):
        self.root = Path(tempfile.mkdtemp(prefix="trakbench_", dir=parent))

    def new(self) -> str:
        return tempfile.mkdtemp(dir=self.root)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def ours(net, x, y, k, bs, folders: Folders | None):
    def fn():
        _cached_matrix.cache_clear()  # cold: the sketch is generated inside the timed call
        save_dir = None if folders is None else folders.new()
        TRAK(net, x, y, k=k, batch_size=bs, save_dir=save_dir).featurize(net.state_dict())

    return fn


def _traker_run(net, x, y, k, bs, folder: str, block_size: int):
    """One featurisation by traker; returns the TRAKer and its projector (for the check)."""
    from trak import TRAKer
    from trak.projectors import BasicProjector, ProjectionType

    p = sum(q.numel() for q in net.parameters())
    proj = BasicProjector(
        grad_dim=p,
        proj_dim=k,
        seed=0,
        proj_type=ProjectionType.rademacher,
        device="cpu",
        block_size=block_size,
    )
    tr = TRAKer(
        model=net,
        task="image_classification",
        train_set_size=len(x),
        save_dir=folder,
        device="cpu",
        proj_dim=k,
        projector=proj,
        use_half_precision=False,
        logging_level=logging.ERROR,
    )
    tr.load_checkpoint(net.state_dict(), model_id=0)
    for s in range(0, len(x), bs):
        tr.featurize(batch=(x[s : s + bs], y[s : s + bs]), inds=np.arange(s, min(len(x), s + bs)))
    return tr, proj


def traker_fn(net, x, y, k, bs, folders: Folders, block_size: int):
    import trak  # noqa: F401  (ImportError here: the baseline is reported as not installed)

    def fn():
        _traker_run(net, x, y, k, bs, folders.new(), block_size)

    return fn


def dattri_fn(net, x, y, k, bs):
    from dattri.algorithm.trak import TRAKAttributor
    from dattri.task import AttributionTask

    loss = nn.CrossEntropyLoss()

    def f(params, data):
        image, label = data
        yhat = torch.func.functional_call(net, params, image.unsqueeze(0))
        logp = -loss(yhat, label.unsqueeze(0))
        return logp - torch.log(1 - torch.exp(logp))

    def prob(params, data):
        image, label = data
        yhat = torch.func.functional_call(net, params, image.unsqueeze(0))
        return torch.exp(-loss(yhat, label.unsqueeze(0)))

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=bs)

    import dattri.algorithm.trak as dattri_trak

    dattri_trak.tqdm = lambda it, *a, **kw: it  # no progress bar per batch inside the timing

    def fn():
        task = AttributionTask(loss_func=f, model=net, checkpoints=net.state_dict())
        att = TRAKAttributor(
            task=task,
            correct_probability_func=prob,
            device="cpu",
            projector_kwargs={"device": "cpu", "proj_dim": k},
        )
        att.cache(loader)

    return fn


def equal_work(net, x, y, k, bs, parent: Path) -> dict:
    """traker (block_size=k) and ours compute the same quantities: traker's stored features
    equal our margin gradients times traker's matrix / sqrt(p) (float32 round-off: ~p * eps
    relative), its stored 1 - p_y equal ours, and both stores hold (n, k) features."""
    folders = Folders(parent)
    try:
        _, proj = _traker_run(net, x, y, k, bs, folders.new(), block_size=k)
        tr_dir = Path(next(folders.root.iterdir())) / "0"
        n = len(x)
        # traker's ".mmap" files are .npy files (numpy's open_memmap), header included
        feats = np.load(tr_dir / "grads.mmap", mmap_mode="r")
        q_tr = np.load(tr_dir / "out_to_loss.mmap", mmap_mode="r")
        if feats.shape != (n, k) or q_tr.shape != (n, 1):
            raise ValueError(f"traker stored {feats.shape} / {q_tr.shape}, expected ({n}, {k})")
        g = per_example_grads(net.eval(), x, y).double()
        m = proj.proj_matrix.double()
        ref = (g @ m / math.sqrt(g.shape[1])).numpy()
        trak = TRAK(net, x, y, k=k, batch_size=bs)
        trak.featurize(net.state_dict())
        ours_feats, ours_q, _ = trak.store.arrays(0)
        rel = float(np.abs(feats - ref).max() / np.abs(ref).max())
        # float32 products of length p: round-off below p * eps32 of the largest entry
        bound = g.shape[1] * float(np.finfo(np.float32).eps)
        return {
            "traker_features_vs_our_grads_times_its_matrix_max_rel": rel,
            "bound_p_eps32": bound,
            "same_features": rel <= bound,
            "reweighting_max_abs_diff": float(np.abs(q_tr[:, 0] - ours_q).max()),
            "feature_shapes": [list(feats.shape), list(ours_feats.shape)],
        }
    finally:
        folders.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="n = 500 only, 3 timed pairs")
    ap.add_argument("--device", default="cpu", choices=["cpu"])
    ap.add_argument("--out", default="featurize_throughput.json")
    ap.add_argument("--sizes", default=None, help="comma-separated n (default 500,2000)")
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=None, help="timed pairs (default 5; quick 3)")
    ap.add_argument("--storage", default="memory,disk", help="comma-separated: memory, disk")
    ap.add_argument(
        "--baselines",
        default="traker,traker-default,dattri",
        help="comma-separated: traker (block_size=k), traker-default (100-column blocks), dattri",
    )
    ap.add_argument("--disk-dir", default=tempfile.gettempdir(), help="folder on disk")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("500" if args.quick else "500,2000")).split(",")]
    repeats = args.repeats or (3 if args.quick else 5)
    storages = args.storage.split(",")
    wanted = args.baselines.split(",")
    for s in storages:
        if s not in ("memory", "disk"):
            raise SystemExit(f"--storage takes memory and/or disk, got {s!r}")
    mem_dir = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())
    where = {"memory": mem_dir, "disk": Path(args.disk_dir)}
    net = _model()
    g = torch.Generator().manual_seed(0)
    x_all = torch.rand(max(sizes), 64, generator=g)
    y_all = torch.randint(0, 10, (max(sizes),), generator=g)
    p = sum(q.numel() for q in net.parameters())
    results, notes = (
        [],
        {
            "storage": {s: {"folder": str(where[s]), "fs": fs_type(where[s])} for s in storages},
            "ours_memory_store": "features in RAM (trak_theory.store.MemoryStore)",
        },
    )

    def run(case, candidate, baseline, params):
        try:
            r = compare(candidate, baseline, name=case, warmup=1, repeats=repeats, params=params)
        except ImportError as exc:
            notes[case] = f"not installed: {exc}"
            return
        except Exception as exc:  # a baseline that does not run is recorded, not fatal
            notes[case] = f"failed: {type(exc).__name__}: {exc}"
            return
        results.append(r)
        print(
            f"{r.name}: ratio median {r.ratio_median:.3f} [{r.ratio_min:.3f}, "
            f"{r.ratio_max:.3f}] -> {1 / r.ratio_median:.2f}x",
            flush=True,
        )

    if "traker" in wanted:
        try:
            notes["equal_work"] = equal_work(
                net, x_all[: sizes[0]], y_all[: sizes[0]], args.k, args.batch, mem_dir
            )
        except ImportError as exc:
            notes["equal_work"] = f"traker not installed: {exc}"
    for n in sizes:
        x, y = x_all[:n], y_all[:n]
        base = {"n": n, "k": args.k, "batch": args.batch, "p": p}
        for storage in storages:
            folders = Folders(where[storage])
            mine = ours(net, x, y, args.k, args.batch, None if storage == "memory" else folders)
            kinds = [("traker", args.k, "traker block_size=k")]
            kinds.append(("traker-default", 100, "traker default blocks (100)"))
            for key, block, label in kinds:
                if key in wanted:
                    params = {**base, "storage": storage, "traker_block_size": block}
                    try:
                        other = traker_fn(net, x, y, args.k, args.batch, folders, block)
                    except ImportError as exc:
                        notes[key] = f"not installed: {exc}"
                        continue
                    run(f"featurize n={n} {storage}: vs {label}", mine, other, params)
            if "dattri" in wanted and storage == "memory":
                try:
                    other = dattri_fn(net, x, y, args.k, args.batch)
                except ImportError as exc:
                    notes["dattri"] = f"not installed: {exc}"
                else:
                    params = {**base, "storage": "memory (dattri's cache)"}
                    run(f"featurize n={n} memory: vs dattri", mine, other, params)
            folders.close()
    write_json(args.out, results, command=" ".join([sys.executable, *sys.argv]), notes=notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
