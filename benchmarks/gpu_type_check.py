"""Does every part of adl name this machine's GPUs the same way (issue 33)?

adl learns one throughput model per GPU type, and a type is a string that three parts must
agree on: the local daemon reads it from ``nvidia-smi -L`` (it does not import torch), the
worker from ``torch.cuda.get_device_name`` with its profile, and on Kubernetes GPU feature
discovery writes it into the node label ``nvidia.com/gpu.product``. If two of them disagree,
a job's profile lands under a type no node has, and the policy cannot use it. This runs the
first two on a GPU machine (the third is the documented normalisation of the same driver
name) and also times the same small model on this type, so the figure can be set beside
another machine's (``--json`` keeps it).

    python benchmarks/gpu_type_check.py --json gpu_types.json       # a GPU machine
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args(argv)

    import torch

    from adl.client_lib.parallel import device_gpu_type
    from adl.local.gpus import detect_gpu_types, node_gpu_type

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU machine", file=sys.stderr)
        return 2
    count = torch.cuda.device_count()
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    daemon = detect_gpu_types(count)
    worker = [device_gpu_type(torch.device("cuda", i)) for i in range(count)]
    raw = [torch.cuda.get_device_name(i) for i in range(count)]

    # the same MLP training step on this type: ms per step and samples/s, for a per-type ratio
    dev = torch.device("cuda", 0)
    model = torch.nn.Sequential(
        *[
            layer
            for _ in range(4)
            for layer in (torch.nn.Linear(args.width, args.width), torch.nn.ReLU())
        ]
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / args.steps * 1000

    result = {
        "nvidia_smi_L": smi.stdout.strip(),
        "torch_device_names": raw,
        "daemon_types": daemon,
        "daemon_node_type": node_gpu_type(daemon),
        "worker_types": worker,
        "agree": daemon == worker and all(worker),
        "mlp": {"width": args.width, "depth": 4, "batch": args.batch, "fp32": True},
        "ms_per_step": round(ms, 3),
        "samples_per_s": round(args.batch / ms * 1000, 1),
        "torch": torch.__version__,
    }
    print("| source | GPU 0 type |")
    print("|---|---|")
    print(f"| torch.cuda.get_device_name | {raw[0]} |")
    print(f"| local daemon (nvidia-smi -L) | {daemon[0] or '(unknown)'} |")
    print(f"| worker (device_gpu_type) | {worker[0] or '(unknown)'} |")
    print(f"agree: {result['agree']}; MLP step {ms:.2f} ms ({result['samples_per_s']} samples/s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
