"""``python -m mars.launch PROCESSES ACCELERATE_CONFIG``: print the command that runs ``mars`` in a train job.

The workflow's train rule runs ``$(python -m mars.launch ...) train --job ...``. How a job is launched is decided
here, at run time, from the job's resources and the accelerators it sees, never from its Snakemake params: the
effective batch is the config's whatever the number of processes, so running on more or fewer GPUs (or another
accelerate config) must not rerun a finished model, and params are rerun triggers.

    PROCESSES           training.processes (0: one process per visible GPU)
    ACCELERATE_CONFIG   training.accelerate_config, relative to the repository ("none": accelerate's DDP defaults)
"""

from __future__ import annotations

import shlex
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A port free on this node now: two multi-process jobs on one node must not share torchrun's default."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def train_launcher(
    gpus: int, accelerate_config: str | None, root: str | Path = ROOT, processes: int | None = None, port: int = 0
) -> str:
    """Plain ``mars`` for one process, else ``accelerate launch`` with ``processes`` processes (default: one per
    GPU) and the accelerate config (a relative path is relative to ``root``). Without GPUs the processes are CPU
    processes over gloo (accelerate's multi-GPU launcher is torchrun, which runs them as well; its ``--cpu`` flag
    would start one)."""
    count = int(processes or gpus or 0)
    if count <= 1:
        return "mars"
    if accelerate_config:
        setup = f"--config_file {shlex.quote(str(Path(root) / accelerate_config))}"
    else:
        setup = "--multi_gpu"
    return (
        f"accelerate launch --num_processes {count} --num_machines 1 --main_process_port {port or free_port()} "
        f"{setup} -m mars.cli"
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print("usage: python -m mars.launch PROCESSES ACCELERATE_CONFIG|none", file=sys.stderr)
        return 2
    processes, accelerate_config = int(argv[0]), None if argv[1] == "none" else argv[1]
    print(train_launcher(0 if processes else visible_gpus(), accelerate_config, ROOT, processes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
