"""Writes the fuzz seed corpora from the real fixtures (run once; the minimised corpora are committed)."""
import glob
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(os.path.dirname(here), "fixtures")
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "seeds")
pts = sorted(glob.glob(f"{fixtures}/**/*.pt", recursive=True))
for kind in ("pt", "pickle", "index"):
    os.makedirs(f"{out}/{kind}", exist_ok=True)
for i, p in enumerate(pts):
    data = open(p, "rb").read()
    open(f"{out}/pt/{i:03d}.pt", "wb").write(data)
    import zipfile
    with zipfile.ZipFile(p) as z:
        pkl = [n for n in z.namelist() if n.endswith("data.pkl")][0]
        open(f"{out}/pickle/{i:03d}.pkl", "wb").write(z.read(pkl))
for name, layout in (("z1_ws2_fp32_pg2", 0), ("z2_ws2_fp32_pg2", 0), ("z3_ws2_fp32_pg2", 1), ("z3_ws2_fp32_pg2_sg200", 1)):
    t = f"{fixtures}/{name}/checkpoint/global_step3"
    files = (["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
             if layout == 0 else
             ["zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt",
              "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"])
    blob = bytes([layout])
    for f in files:
        d = open(f"{t}/{f}", "rb").read()
        blob += struct.pack("<I", len(d)) + d
    open(f"{out}/index/{name}.bin", "wb").write(blob)
