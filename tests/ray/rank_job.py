#!/usr/bin/env python3
"""A test job for multi-node runs: every process records what it was given and meets the others.

Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank connects and sends its rank, and rank 0
answers each with the sorted list of the ranks it heard from (so all ranks agree on the world). Each
process writes ``rank-RANK.json`` (its environment of interest, pid and that list) in its checkpoint
folder. Exits 0 once the rendezvous succeeded, 5 if it timed out. ``--hold S`` keeps every process
alive S seconds after the rendezvous (stops early on SIGTERM, exit 75).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES", "TESSERAE_NODE_ID", "TESSERAE_NODE_IP", "TESSERAE_JOB_ID", "TESSERAE_NUM_GPUS",
        "TESSERAE_GPU_IDS")


def rendezvous(rank: int, world: int, addr: str, port: int, timeout: float = 40.0) -> list[int]:
    deadline = time.monotonic() + timeout
    if rank == 0:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, port))
        srv.listen(world)
        srv.settimeout(timeout)
        conns, ranks = [], [0]
        while len(conns) < world - 1:
            c, _ = srv.accept()
            ranks.append(int(c.recv(64).decode()))
            conns.append(c)
        ranks.sort()
        for c in conns:
            c.sendall(json.dumps(ranks).encode())
            c.close()
        srv.close()
        return ranks
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    c.sendall(str(rank).encode())
    c.settimeout(timeout)
    data = b""
    while True:
        chunk = c.recv(4096)
        if not chunk:
            break
        data += chunk
    return list(json.loads(data.decode()))


def main() -> int:
    started = time.time()
    hold = float(sys.argv[sys.argv.index("--hold") + 1]) if "--hold" in sys.argv else 0.0
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    env = {k: os.environ.get(k) for k in KEYS}
    rank, world = int(env["RANK"] or 0), int(env["WORLD_SIZE"] or 1)
    out = os.environ.get("TESSERAE_CHECKPOINT_DIR", ".")
    os.makedirs(out, exist_ok=True)
    try:
        peers = rendezvous(rank, world, env["MASTER_ADDR"] or "127.0.0.1", int(env["MASTER_PORT"] or 0))
        code = 0
    except OSError as e:
        print(f"rank {rank}: rendezvous failed: {e}", flush=True)
        peers, code = [], 5
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"env": env, "pid": os.getpid(), "peers": peers, "started": started}, f)
    print(f"rank {rank}/{world} on {env['TESSERAE_NODE_IP']} gpus={env['CUDA_VISIBLE_DEVICES']} peers={peers}",
          flush=True)
    t0 = time.monotonic()
    while code == 0 and time.monotonic() - t0 < hold:
        if stop:
            return 75
        time.sleep(0.05)
    return code


if __name__ == "__main__":
    sys.exit(main())
