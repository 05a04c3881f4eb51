#!/usr/bin/env python3
"""A PyTorch trainer for GPU machines: a small GPT (decoder-only transformer) on synthetic tokens.

It uses ``tesserae.job`` for progress, checkpoints (model and optimizer state dicts through
``torch.save``) and preemption: on SIGTERM every rank agrees (an all-reduce of the flag) to stop
after the same iteration, rank 0 saves, and all exit with the preemption code; the next run
resumes from that iteration. The synthetic batches are a function of (iteration, rank), so a
resumed run sees exactly the data it would have seen without the preemption.

From the repository's root, with the Python that has tesserae and PyTorch first on the server's
PATH (the job runs in its own folder, so the script's path is absolute). One process per job::

    tesserae submit --gpus 1 --iterations 2000 -- python $PWD/examples/pytorch_trainer.py --iterations 2000

Data-parallel over 4 GPUs, one process per GPU (the runtime sets RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT; NCCL is used on GPUs; rank 0 alone writes progress and checkpoints)::

    tesserae submit --gpus 4 --nproc 4 --iterations 2000 -- python $PWD/examples/pytorch_trainer.py \\
        --iterations 2000

PyTorch is imported inside ``main``: importing this file needs no PyTorch, and running it without
PyTorch says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, required=True, help="Total training iterations.")
    p.add_argument("--batch-size", type=int, default=16, help="Sequences per iteration and rank.")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--checkpoint-every", type=int, default=500, help="Also checkpoint every K iterations (0: only "
                                                                      "on preemption and at the end).")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--log-every", type=int, default=50)
    return p.parse_args(argv)


def build_model(torch: Any, args: argparse.Namespace) -> Any:
    nn = torch.nn

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.d_model)
            self.pos = nn.Embedding(args.seq_len, args.d_model)
            layer = nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model, dropout=0.0,
                                               batch_first=True, norm_first=True, activation="gelu")
            self.blocks = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(args.seq_len),
                                 persistent=False)

        def forward(self, x: Any) -> Any:
            t = x.shape[1]
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
            return self.head(self.norm(h))

    return TinyGPT()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
    except ImportError:
        print("pytorch_trainer.py needs PyTorch: pip install torch (or pip install 'tesserae[profiler]')",
              file=sys.stderr)
        return 2
    from tesserae.job import Job

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda but CUDA is not available", file=sys.stderr)
        return 2
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world)

    job = Job(total_iterations=args.iterations)
    model = build_model(torch, args).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    state = job.restore(map_location=device)
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["iteration"])
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None) \
        if world > 1 else model
    params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"gpt: {params / 1e6:.1f}M parameters, world {world}, device {device}, start iteration {start} "
              f"of {args.iterations}", flush=True)

    def save(iteration: int) -> None:
        if rank == 0:
            job.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iteration": iteration},
                     iteration=iteration)
        if world > 1:
            dist.barrier()

    t0, tokens = time.perf_counter(), 0
    amp = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if use_cuda else torch.autocast("cpu",
                                                                                                  enabled=False)
    for it in range(start, args.iterations):
        g = torch.Generator().manual_seed(it * 1_000_003 + rank)
        batch = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=g).to(device)
        with amp:
            logits = net(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += args.batch_size * args.seq_len * world
        if rank == 0:
            job.report(it + 1)
        stop = torch.tensor([int(job.preempted)], device=device)
        if world > 1:
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops after the same iteration
        if stop.item():
            save(it + 1)
            if rank == 0:
                print(f"gpt: preempted after iteration {it + 1}; checkpoint saved", flush=True)
            job.exit_preempted()
        if args.checkpoint_every and (it + 1) % args.checkpoint_every == 0:
            save(it + 1)
        if rank == 0 and (it + 1) % args.log_every == 0:
            if use_cuda:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            print(f"gpt: iteration {it + 1} loss {loss.item():.3f} {tokens / dt:,.0f} tokens/s", flush=True)
            t0, tokens = time.perf_counter(), 0
    save(args.iterations)
    job.complete()
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
