#!/usr/bin/env bash
# Train several G2P configurations side by side on one GPU (each process is bound by
# kernel launches, so they interleave well), then keep the best checkpoints by dev WER.
#
#   MINUTES=6.5 OUT=/tmp/out scripts/gpu_sweep.sh
#
# Ensemble members (training/ensemble.py): the shipped configuration with other seeds, weights
# returned in fp16 so that four fit in what a device run brings back:
#
#   NAMES="add-s2 add-s3 add-s4 add-s5" MINUTES=8 EXTRA="--epoch-lr-decay 0.88" HALF=1 scripts/gpu_sweep.sh
#
# This is how the shipped model's candidates were trained (on one H200; docs/models.md,
# "How this configuration was chosen"); each line is an ordinary `python -m training.train`
# command that also runs, slower, on CPU with --device cpu.
set -u
MINUTES=${MINUTES:-6.5}
OUT=${OUT:-runs/sweep-out}
RUNS=${RUNS:-runs/sweep}
PY=${PY:-python3}
DEVICE=${DEVICE:-auto}
EXTRA=${EXTRA:-}
THREADS=${THREADS:-2}
HARD_S=${HARD_S:-3600}  # a hung run must not eat the machine's whole lease
mkdir -p "$RUNS" "$OUT"
common="--corpus cmudict --lr 2e-3 --epoch-lr-decay 0.97 --lr-decay 0.5 --min-lr 2e-5 --patience-epochs 10
        --max-epochs 400 --batch-size 256 --emb-dim 128 --max-minutes $MINUTES --device $DEVICE --threads $THREADS $EXTRA"
declare -A cfg=(
  [h512]="--hidden-size 512 --enc-layers 2 --dec-layers 1 --attention general --dropout 0.3"
  [h512e3]="--hidden-size 512 --enc-layers 3 --dec-layers 1 --attention general --dropout 0.3"
  [h512add]="--hidden-size 512 --enc-layers 2 --dec-layers 1 --attention additive --dropout 0.3"
  [h512sa]="--hidden-size 512 --enc-layers 2 --dec-layers 1 --attention general --dropout 0.3 --self-attention-heads 4"
  [h512d2]="--hidden-size 512 --enc-layers 2 --dec-layers 2 --attention general --dropout 0.4"
  [h384]="--hidden-size 384 --enc-layers 2 --dec-layers 1 --attention general --dropout 0.3"
  [h768]="--hidden-size 768 --enc-layers 2 --dec-layers 1 --attention general --dropout 0.4"
  [h512s2]="--hidden-size 512 --enc-layers 2 --dec-layers 1 --attention general --dropout 0.3 --seed 2"
)
for seed in 2 3 4 5 6 7; do
  cfg[add-s$seed]="--hidden-size 512 --enc-layers 2 --dec-layers 1 --attention additive --dropout 0.3 --seed $seed"
done
for name in ${NAMES:-h512 h512e3 h512add h512sa h512d2 h384 h768 h512s2}; do
  # shellcheck disable=SC2086
  timeout -s INT "$HARD_S" $PY -m training.train $common ${cfg[$name]} --out "$RUNS/$name" >"$RUNS/$name.log" 2>&1 &
done
wait
HALF=${HALF:-0} $PY - "$RUNS" "$OUT" <<'PY'
import json, os, pathlib, shutil, sys, tarfile
import torch
runs, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = []
for ckpt in sorted(runs.glob("*/best.pt")):
    c = torch.load(ckpt, map_location="cpu", weights_only=False)
    n = sum(v.numel() for v in c["state_dict"].values())
    rows.append({"name": ckpt.parent.name, "dev_wer": c["dev_wer"], "dev_per": c["dev_per"],
                 "epoch": c["epoch"], "epochs": len(c["history"]), "params": n,
                 "minutes": c["history"][-1]["minutes"], "bytes": ckpt.stat().st_size})
rows.sort(key=lambda r: r["dev_wer"])
print(json.dumps(rows, indent=1))
(out / "sweep.json").write_text(json.dumps(rows, indent=1))
# Return the best checkpoints that fit in 56 MB, plus every log and history. HALF=1 stores the
# weights in fp16 (half the bytes; loading into the fp32 model converts them back).
half = os.environ["HALF"] == "1"
for r in rows if half else []:
    c = torch.load(runs / r["name"] / "best.pt", map_location="cpu", weights_only=False)
    c["state_dict"] = {k: v.half() if v.is_floating_point() else v for k, v in c["state_dict"].items()}
    torch.save(c, runs / r["name"] / "best.half.pt")
    r["bytes"] = (runs / r["name"] / "best.half.pt").stat().st_size
budget, keep = 56e6, []
for r in rows:
    if r["bytes"] <= budget:
        keep.append(r["name"]); budget -= r["bytes"]
with tarfile.open(out / "sweep.tar", "w") as tar:
    for p in sorted(runs.glob("*.log")) + sorted(runs.glob("*/history.*")):
        tar.add(p, arcname=str(p.relative_to(runs)))
    for name in keep:
        tar.add(runs / name / ("best.half.pt" if half else "best.pt"), arcname=f"{name}/best.pt")
print("kept", keep)
PY
cd "$OUT" && split -b 15M sweep.tar sweep.tar.part- && rm sweep.tar && ls -la
