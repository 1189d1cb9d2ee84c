"""Cell 5 (inside the HF chroot): what DeepSpeed's and HF's own tools do with the real Trainer files.
zero_to_fp32.py is run as users run it: the copy the Trainer leaves in checkpoint-N/.
Writes /w/o23/res/cell5.json with each command, its exit status and its last error line."""
import json
import subprocess

O = "/w/o23"
CK = f"{O}/fix/gpt2_z2/run/checkpoint-2"
CASES = [
    ("ds_to_universal.py on a Trainer ZeRO-2 checkpoint, no --inject_missing_state",
     f"rm -rf /tmp/u && python3 /ds/deepspeed/checkpoint/ds_to_universal.py --input_folder {CK}/global_step2 --output_folder /tmp/u/global_step2_universal"),
    ("ds_to_universal.py on it with --inject_missing_state",
     f"rm -rf /tmp/u && python3 /ds/deepspeed/checkpoint/ds_to_universal.py --input_folder {CK}/global_step2 --output_folder /tmp/u/global_step2_universal --inject_missing_state"),
    ("ds_to_universal.py on a Trainer ZeRO-3 checkpoint",
     f"rm -rf /tmp/u && python3 /ds/deepspeed/checkpoint/ds_to_universal.py --input_folder {O}/fix/llama_z3/run/checkpoint-2/global_step2 --output_folder /tmp/u/global_step2_universal"),
    ("zero_to_fp32.py --safe_serialization on GPT-2 (tied lm_head/wte)",
     f"rm -rf /tmp/z && python3 {CK}/zero_to_fp32.py {CK} /tmp/z --safe_serialization"),
    ("zero_to_fp32.py (pickle) on GPT-2",
     f"rm -rf /tmp/z && python3 {CK}/zero_to_fp32.py {CK} /tmp/z && ls /tmp/z"),
    ("/ds/deepspeed/utils/zero_to_fp32.py run from DeepSpeed's source tree",
     f"rm -rf /tmp/z && python3 /ds/deepspeed/utils/zero_to_fp32.py {CK} /tmp/z"),
    ("from_pretrained of zero_to_fp32.py's output folder (no config.json)",
     f"rm -rf /tmp/z && python3 {O}/fix/llama_z3/run/checkpoint-2/zero_to_fp32.py {O}/fix/llama_z3/run/checkpoint-2 /tmp/z --safe_serialization && "
     "python3 -c 'from transformers import AutoModelForCausalLM as A; A.from_pretrained(\"/tmp/z\")'"),
]


def main():
    out = []
    for what, cmd in CASES:
        r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        lines = [l for l in (r.stderr + r.stdout).strip().splitlines() if l.strip()]
        idx = next((i for i in range(len(lines) - 1, -1, -1) if "Error" in lines[i]), len(lines) - 1)
        err = " ".join(l.strip() for l in lines[idx:idx + 3]) if lines else ""
        row = {"what": what, "cmd": cmd, "rc": r.returncode, "last": err[:400]}
        out.append(row)
        print(json.dumps(row), flush=True)
    json.dump(out, open(f"{O}/res/cell5.json", "w"), indent=1)


if __name__ == "__main__":
    main()
