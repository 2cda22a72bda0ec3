# Byte-level GPT trained from scratch with BF16 autocast and a chosen attention variant, with per-step telemetry and gradient audits.
# Exercised by scripts/train_smoke.sh (tiny CPU runs) and tests/python/test_train_gpt.py; docs/experiment.md gives the commands.
import argparse
import collections
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_audit  # noqa: E402
import prepare_data  # noqa: E402

VOCAB = 256  # bytes as tokens


class Attention(nn.Module):
    """Causal self-attention whose kernel is picked by name; on request it keeps the step's q, k, v and dO."""

    def __init__(self, d_model, n_heads, variant):
        super().__init__()
        self.n_heads, self.variant = n_heads, variant
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.capture = None  # a dict while capturing: q, k, v after the forward, do after the backward

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, d // self.n_heads).unbind(2)
        o = attention_audit.attend(q, k, v, self.variant)
        if self.capture is not None and torch.is_grad_enabled():
            store = self.capture
            store.update(q=q.detach(), k=k.detach(), v=v.detach())
            o.register_hook(lambda grad: store.__setitem__("do", grad.detach()))
        return self.proj(o.reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, variant):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, variant)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Pre-LayerNorm GPT over bytes: learned positions, GELU MLP, output head tied to the token embedding."""

    def __init__(self, layers, d_model, n_heads, context, variant):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of heads {n_heads}")
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, variant) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                # Residual-stream output projections scaled down by depth (GPT-2's initialisation).
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("attn.proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


def build_model(args):
    """The model for `args`, initialised from `args.seed` alone: every variant starts from the same weights."""
    torch.manual_seed(args.seed)
    return GPT(args.layers, args.d_model, args.heads, args.context, args.attention)


class Batches:
    """Random windows of the token stream from a generator seeded by the data seed only, so the data order is
    the same for every variant and every world size: each step draws the global batch, a rank takes its slice."""

    def __init__(self, tokens, context, batch, seed, rank=0, world=1):
        self.tokens, self.context, self.batch = tokens, context, batch
        self.rank, self.world = rank, world
        self.rng = np.random.default_rng(seed)
        if len(tokens) <= context + 1:
            raise ValueError(f"{len(tokens)} tokens are too few for context {context}")

    def next(self):
        starts = self.rng.integers(0, len(self.tokens) - self.context - 1, size=self.batch)
        per_rank = self.batch // self.world
        rows = [np.asarray(self.tokens[s : s + self.context + 1], dtype=np.int64)
                for s in starts[self.rank * per_rank : (self.rank + 1) * per_rank]]
        chunk = torch.from_numpy(np.stack(rows))
        return chunk[:, :-1], chunk[:, 1:]


def lr_at(step, args):
    """Linear warm-up from 0 over `warmup` steps, then constant."""
    return args.lr * min(1.0, (step + 1) / args.warmup) if args.warmup > 0 else args.lr


def spectral_norms(model, d_model):
    """Per layer, the spectral norms of W_q and W_k (the first two d_model-row blocks of the qkv weight)."""
    out = []
    for block in model.blocks:
        w = block.attn.qkv.weight.detach().float()
        out.append({"wq": torch.linalg.matrix_norm(w[:d_model], ord=2).item(),
                    "wk": torch.linalg.matrix_norm(w[d_model : 2 * d_model], ord=2).item()})
    return out


def run_audit(model, args, step, run_dir):
    """Audits the captured q, k, v, dO of the audited layers (first `audit_batch` sequences) and saves them as
    states."""
    records = []
    norms = spectral_norms(model, args.d_model)
    for layer, block in enumerate(model.blocks):
        if args.audit_layers is not None and layer not in args.audit_layers:
            continue
        cap = {name: t[: args.audit_batch].to(torch.bfloat16) for name, t in block.attn.capture.items()}
        rec = {"step": step, "layer": layer, "variant": args.attention, **norms[layer]}
        rec.update(attention_audit.audit_layer(cap["q"], cap["k"], cap["v"], cap["do"], args.attention))
        if args.save_states:
            path = os.path.join(run_dir, "states", f"step{step:07d}_layer{layer:02d}.safetensors")
            attention_audit.write_state(path, cap, {"causal": "true", "step": step, "layer": layer,
                                                    "source": f"examples/train_gpt.py {args.attention} seed {args.seed}"})
            rec["state"] = os.path.relpath(path, run_dir)
        records.append(rec)
    return records


def environment(args, world):
    """Versions and the configuration, for env.json."""
    import gproj

    env = {"gproj": gproj.build_info(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "numpy": np.__version__, "host": platform.node(),
           "world_size": world, "config": vars(args)}
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, check=True).stdout.split("\n")[0]
        except (OSError, subprocess.CalledProcessError) as err:
            env["driver"] = f"unknown ({err})"
    return env


@torch.no_grad()
def evaluate(model, tokens, args, device):
    """Mean loss over `eval_batches` fixed batches of the validation split (same batches at every evaluation)."""
    model.eval()
    batches = Batches(tokens, args.context, args.batch, seed=args.seed + 2)
    losses = []
    for _ in range(args.eval_batches):
        x, y = batches.next()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            losses.append(model(x.to(device), y.to(device)).item())
    model.train()
    return sum(losses) / len(losses)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Train a byte-level GPT with a chosen BF16 attention variant.")
    ap.add_argument("--attention", default="gproj-gproj", choices=attention_audit.VARIANTS)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32, help="global batch (split across ranks)")
    ap.add_argument("--steps", type=int, default=15000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", nargs="*", default=None, help="text files/folders (default: the Python stdlib)")
    ap.add_argument("--data-cache", default="build/data")
    ap.add_argument("--max-bytes", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", required=True, help="run folder (created)")
    ap.add_argument("--audit-every", type=int, default=500, help="0: never")
    ap.add_argument("--audit-batch", type=int, default=4, help="sequences of the step's batch that are audited")
    ap.add_argument("--audit-layers", default=None,
                    help="comma-separated layers to audit (and save states of); default every layer")
    ap.add_argument("--audit-window", default=None, metavar="START:END:EVERY",
                    help="extra audits every EVERY steps for START <= step < END (a spike seen in an earlier run "
                         "with the same seed and data order: the same steps come again)")
    ap.add_argument("--no-save-states", dest="save_states", action="store_false")
    ap.add_argument("--save-states", dest="save_states", action="store_true",
                    help="(the default) save the audited states; the last of the two flags wins")
    ap.add_argument("--eval-every", type=int, default=500, help="0: never")
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--continue-after-divergence", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the training step's model (audit steps run eagerly: they hook q, k, v, dO)")
    ap.add_argument("--sync-every", type=int, default=25,
                    help="steps between host syncs for the metrics (each step is still recorded)")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds: stop cleanly after the step that passes it (summary.json says so)")
    args = ap.parse_args(argv)
    if args.audit_layers is not None:
        try:
            args.audit_layers = sorted({int(x) for x in args.audit_layers.split(",") if x.strip()})
        except ValueError:
            ap.error(f"--audit-layers: comma-separated integers expected, got {args.audit_layers!r}")
        bad = [x for x in args.audit_layers if not 0 <= x < args.layers]
        if bad or not args.audit_layers:
            ap.error(f"--audit-layers: layers are 0..{args.layers - 1}, got {bad or 'none'}")
    if args.audit_window is not None:
        try:
            start, end, every = (int(x) for x in args.audit_window.split(":"))
        except ValueError:
            ap.error(f"--audit-window: START:END:EVERY expected, got {args.audit_window!r}")
        if not (0 <= start < end and every > 0):
            ap.error(f"--audit-window: need 0 <= START < END and EVERY > 0, got {args.audit_window!r}")
        args.audit_window = (start, end, every)
    return args


def is_audit_step(step, args):
    """Audits every `audit_every` steps (not step 0) and every EVERY steps inside the audit window."""
    if args.audit_every > 0 and step % args.audit_every == 0 and step > 0:
        return True
    if args.audit_window is not None:
        start, end, every = args.audit_window
        return start <= step < end and (step - start) % every == 0
    return False


class DivergenceDetector:
    """Grad norm above `factor` x the running median of the last `window` steps for `patience` steps in a row."""

    def __init__(self, factor=10.0, patience=50, window=500, min_history=100):
        self.factor, self.patience, self.min_history = factor, patience, min_history
        self.history = collections.deque(maxlen=window)
        self.streak = 0

    def update(self, grad_norm):
        """Adds a step's grad norm; True when the streak reaches `patience`."""
        if len(self.history) >= self.min_history and grad_norm > self.factor * statistics.median(self.history):
            self.streak += 1
        else:
            self.streak = 0
        self.history.append(grad_norm)
        return self.streak >= self.patience


def main(argv=None):
    args = parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        if args.batch % world:
            raise SystemExit(f"--batch {args.batch} is not divisible by WORLD_SIZE {world}")
        torch.distributed.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        args.device = "cuda"
    else:
        device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    lead = rank == 0

    meta_path = prepare_data.prepare(args.data, args.data_cache, args.max_bytes) if lead else None
    if world > 1:
        box = [meta_path]
        torch.distributed.broadcast_object_list(box, src=0)
        meta_path = box[0]
    train_tokens, val_tokens, data_meta = prepare_data.load(meta_path)
    if args.eval_every > 0 and len(val_tokens) <= args.context + 1:
        raise SystemExit(f"the validation split ({len(val_tokens)} bytes) is too short for context {args.context}")

    model = build_model(args).to(device)
    raw_model = model
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    # Compiled for the ordinary steps; every rank runs an audit step eagerly (the capture hooks), so the ranks
    # always run the same kind of step.
    step_model = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0,
                            fused=device.type == "cuda")
    batches = Batches(train_tokens, args.context, args.batch, seed=args.seed + 1, rank=rank, world=world)
    detector = DivergenceDetector()

    if lead:
        os.makedirs(os.path.join(args.out, "states"), exist_ok=True)
        with open(os.path.join(args.out, "env.json"), "w") as f:
            json.dump({**environment(args, world), "data": data_meta}, f, indent=1)
        metrics = open(os.path.join(args.out, "metrics.jsonl"), "w")
        audits = open(os.path.join(args.out, "audit.jsonl"), "w")

    summary = {"diverged_at": None, "steps_done": 0}
    start = time.time()
    last_print = 0.0
    pending = []  # (step, loss, grad norm, lr, val_loss) with loss and grad norm still on the device
    window_start = time.time()

    def flush():
        """Brings the pending steps' loss and grad norm to the host in one transfer (no sync in every step),
        writes their records and feeds the divergence detector; returns True when training must stop."""
        nonlocal pending, window_start, last_print
        if not pending:
            return False
        values = torch.stack([torch.stack([l.float(), g.float()]) for _, l, g, _, _ in pending]).tolist()
        now = time.time()
        tokens_per_s = len(pending) * args.batch * args.context / max(now - window_start, 1e-9)
        stop = False
        for (step, _, _, lr, val), (loss, grad_norm) in zip(pending, values):
            summary.update(steps_done=step + 1, final_loss=loss)
            if lead:
                record = {"step": step, "loss": loss, "grad_norm": grad_norm, "lr": lr, "tokens_per_s": tokens_per_s}
                if val is not None:
                    record["val_loss"] = summary["final_val_loss"] = val
                metrics.write(json.dumps(record) + "\n")
            if not math.isfinite(loss) or not math.isfinite(grad_norm):
                summary["nonfinite_at"] = step
                stop = True
                break
            if detector.update(grad_norm) and summary["diverged_at"] is None:
                summary["diverged_at"] = step - detector.patience + 1
                if not args.continue_after_divergence:
                    stop = True
                    break
        if lead:
            metrics.flush()
            if now - last_print > 0.5 or summary["steps_done"] == args.steps:
                print(f"\r{args.attention} step {summary['steps_done']}/{args.steps} loss {summary['final_loss']:.4f} "
                      f"gnorm {values[-1][1]:.3f} {tokens_per_s:,.0f} tok/s", end="", file=sys.stderr, flush=True)
                last_print = now
        pending, window_start = [], now
        if args.time_limit is not None and not stop:
            over = torch.tensor([float(now - start > args.time_limit)], device=device)
            if world > 1:  # every rank stops at the same step
                torch.distributed.all_reduce(over, op=torch.distributed.ReduceOp.MAX)
            if over.item() > 0:
                summary["stopped"] = f"time limit {args.time_limit:g} s after step {summary['steps_done'] - 1}"
                stop = True
        return stop

    for step in range(args.steps):
        # Decided alike on every rank (the flush below syncs ranks); only the lead audits and evaluates.
        audit_step = is_audit_step(step, args)
        eval_step = args.eval_every > 0 and ((step + 1) % args.eval_every == 0 or step + 1 == args.steps)
        auditing = lead and audit_step
        for block in raw_model.blocks:
            block.attn.capture = {} if auditing else None
        lr = lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batches.next()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = (model if audit_step else step_model)(x.to(device, non_blocking=True),
                                                         y.to(device, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        loss = loss.detach()
        if world > 1:
            torch.distributed.all_reduce(loss, op=torch.distributed.ReduceOp.AVG)
        val = evaluate(raw_model, val_tokens, args, device) if lead and eval_step else None
        pending.append((step, loss, grad_norm.detach(), lr, val))
        if auditing:
            for rec in run_audit(raw_model, args, step, args.out):
                audits.write(json.dumps(rec) + "\n")
            audits.flush()
        if len(pending) >= args.sync_every or audit_step or eval_step or step + 1 == args.steps:
            if flush():
                break

    for block in raw_model.blocks:
        block.attn.capture = None
    if lead:
        print(file=sys.stderr)
        summary["wall_s"] = time.time() - start
        metrics.close()
        audits.close()
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
