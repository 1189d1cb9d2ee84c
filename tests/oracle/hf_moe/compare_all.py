#!/usr/bin/env python3
"""host: for every run, compare the mount's weights folders with the Trainer's checkpoint-2/model.safetensors
(st_compare.py) and count keys runtime vs saved. -> /tmp/hf-oracle/work/res/stcmp_<NAME>.json"""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_compare as s
Z = "/tmp/hf-oracle/rootfs/zm-mnt"; RUNS = "/tmp/hf-oracle/work/runs"; RES = "/tmp/hf-oracle/work/res"
for name in sys.argv[1:]:
    bf16 = name.endswith("bf16")
    real = f"{RUNS}/{name}/checkpoint-2"
    out = {"name": name}
    for v in ("", "-s", "-r"):
        for fo in (["global_step2_fp32", "global_step2_bf16"] if bf16 else ["global_step2_fp32"]):
            d = f"{Z}/{name}{v}/checkpoint-2/{fo}"
            try:
                r = s.compare(d, real)
                r["listing"] = sorted(os.listdir(d))
                if "README.md" in r["listing"]:
                    r["readme"] = open(f"{d}/README.md").read()[:2000]
                # config.json / generation_config.json bytes equal to the checkpoint folder's
                r["config_equal"] = {f: open(f"{d}/{f}", "rb").read() == open(f"{real}/{f}", "rb").read()
                                     for f in ("config.json", "generation_config.json") if os.path.exists(f"{d}/{f}")}
            except Exception as e:
                r = {"error": repr(e)}
            out[f"{name}{v}/{fo}"] = r
    json.dump(out, open(f"{RES}/stcmp_{name}.json", "w"), indent=1)
    for k, r in out.items():
        if k == "name": continue
        if "error" in r: print(k, r["error"]); continue
        print(f"{k}: keys {r['keys_a']} vs trainer {r['keys_b']} keys_eq={r['keys_equal']} shapes={r['shapes_equal']} "
              f"dtypes={r['dtypes_equal']}({r['dtypes_a']} vs {r['dtypes_b']}) bytes={r['bytes_equal']} n_bytes_bad={r['n_bytes_bad']} "
              f"files={len(r['files_a'])} cfg={r['config_equal']} only_a={r['only_a'][:3]} only_b={r['only_b'][:3]}")
