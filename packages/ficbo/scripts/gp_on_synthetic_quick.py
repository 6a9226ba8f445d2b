"""GP baselines on the synthetic quick tasks (same tasks and first points as the README table).

Cited by the README (GP-TS and feedback GP). Run from the repository root:

    python packages/ficbo/scripts/gp_on_synthetic_quick.py
"""

import json
import time
from pathlib import Path

from ficbo.baselines import gp_ei_policy, gp_feedback_policy, gp_ts_policy
from ficbo.experiments.synthetic import SETTINGS, paired_interval, run_setting, sizes
from ficbo.model import pretrained
from ficbo.optimize import model_policy

sz = sizes(True)
out = {}
t0 = time.perf_counter()
for setting, rho in SETTINGS.items():
    pols = {"ficbo": model_policy(pretrained("quick-ficbo")), "gp-feedback": gp_feedback_policy()}
    if setting == "informative":
        pols |= {"gp-ei": gp_ei_policy(), "gp-ts": gp_ts_policy()}
    reg, _ = run_setting(pols, rho, sz, 0)
    fin = {k: v[:, -1] for k, v in reg.items()}
    out[setting] = {k: float(v.mean()) for k, v in fin.items()}
    for k in fin:
        if k != "ficbo":
            out[setting][f"ficbo-{k}"] = paired_interval(fin["ficbo"] - fin[k])
    print(setting, out[setting], round(time.perf_counter() - t0), flush=True)
out["seconds"] = time.perf_counter() - t0
Path("packages/ficbo/docs/results/gp_on_synthetic_quick.json").write_text(json.dumps(out, indent=1))
