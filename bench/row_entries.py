#!/usr/bin/env python3
"""How many entries of each softmax row reach thresh-lowrank's threshold (bf16(P) >= 1/16), on attention state
files and on the benchmark's synthetic inputs (Gaussian; queries x 2 and x 4, `cuda_attention_bench --q-scale`;
an attention sink, `--sink`, built the same way as there). The per-entry work of gproj's projection (the row
lists) scales with this count, so it says which benchmark inputs look like trained attention
(docs/perf-notes.md). It also says, per 64 x 64 tile, how often an entry exists and how often the forward's bound
of docs/design-block-flags.md would flag the tile, with the running or the final row mass (a tile with an entry
must always be flagged). Its last table models how long the dQ postprocess's warps wait at their CTA's barrier
when their rows list different numbers of entries (cta_balance). CPU only (torch); prints Markdown tables and
writes them with --out."""
import argparse
import datetime
import json
import math
import os
import platform
import struct
import sys
from types import SimpleNamespace

import torch


def read_state(path, names=("q", "k")):
    """The tensors `names` (default q, k; each (B, N, H, D)) as float32, then the `causal` flag, of a BF16
    safetensors attention state."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"{path}: truncated (no safetensors header)")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name in names:
        entry = header.get(name)
        if entry is None or entry["dtype"] != "BF16" or len(entry["shape"]) != 4:
            sys.exit(f"{path}: needs rank-4 BF16 tensors {', '.join(names)} ('{name}' is missing or not one)")
        begin, end = entry["data_offsets"]
        if 8 + n + end > len(blob):
            sys.exit(f"{path}: truncated ('{name}' runs past the end of the file)")
        raw = bytearray(blob[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=torch.bfloat16).reshape(entry["shape"]).float()
    causal = str(header.get("__metadata__", {}).get("causal", "false")).lower() in ("1", "true")
    return (*(out[name] for name in names), causal)


def print_and_save(text, out=None):
    """Prints a study's table and, when `out` is given, writes it there whole (a temporary file, then a rename)."""
    print(text, end="")
    if out:
        tmp = f"{out}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, out)


def scores(q, k, causal):
    """The scaled scores (B, H, Nq, Nk) of q (B, Nq, H, D) against k (B, Nk, Hkv, D), -inf where causal masking
    hides a key (bottom-right aligned, as everywhere in gproj)."""
    B, N, H, D = q.shape
    qh = q.permute(0, 2, 1, 3)
    kh = k.permute(0, 2, 1, 3).repeat_interleave(H // k.shape[2], dim=1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(D)
    if causal:
        Nk = kh.shape[2]
        keep = torch.ones(N, Nk, dtype=torch.bool).tril(Nk - N)
        s = s.masked_fill(~keep, float("-inf"))
    return s


def float64_reference(q, k, v, do, causal):
    """What the CPU studies of one state ((B, N, H, D) tensors, keys and values possibly with fewer heads) build on:
    the float64 scores `s` (B, H, Nq, Nk; -inf where masked), `scale`, q, k, v, do head-major in float64 with the
    kv heads repeated for their query heads, the float64 softmax `p64` and dS `ds64`, and the kernel's FP32 P `p`
    (from the FP32 scores and LSE)."""
    s = scores(q.double(), k.double(), causal)
    group = q.shape[2] // k.shape[2]  # grouped keys and values: each query head reads its group's
    qh, doh = (x.double().permute(0, 2, 1, 3) for x in (q, do))
    kh, vh = (x.double().permute(0, 2, 1, 3).repeat_interleave(group, 1) for x in (k, v))
    p64 = s.softmax(-1).nan_to_num(0.0)
    ds64 = p64 * (doh @ vh.transpose(-1, -2) - (doh * (p64 @ vh)).sum(-1, keepdim=True))
    s32 = s.float()
    p = torch.exp(s32 - torch.logsumexp(s32, -1, keepdim=True)).nan_to_num(0.0)
    return SimpleNamespace(s=s, scale=1.0 / math.sqrt(q.shape[3]), q=qh, k=kh, v=vh, do=doh, p64=p64, ds64=ds64,
                           p=p)


def bf16_probs(q, k, causal):
    """The softmax rows rounded to BF16 as the kernels list them, (B, H, Nq, Nk) floats. The table functions below
    take it as `p` when the caller has it already (main computes it once per input)."""
    return scores(q, k, causal).softmax(-1).to(torch.bfloat16).float()


def row_entries(q, k, causal, threshold=1.0 / 16, p=None):
    """Mean count per row of softmax entries with bf16(P) >= threshold, the share of rows with one or more, the
    mean row max of P, and the share of rows whose threshold entries include key 0 (a sink)."""
    p = bf16_probs(q, k, causal) if p is None else p
    listed = p >= threshold
    count = listed.sum(-1).float()
    return {"entries_per_row": count.mean().item(), "rows_with_entries": (count > 0).float().mean().item(),
            "mean_max_p": p.max(-1).values.mean().item(), "rows_listing_key0": listed[..., 0].float().mean().item()}


def tiled_probs(q, k, causal, block=64):
    """The scaled scores padded with -inf to whole block x block tiles, and the softmax of every row in the kernels'
    form: ref (the row max, or -1e30 for a row with no visible key), e = exp(s - ref) (0 where masked) and bf16(P)
    as FP32 (0 in a row with no visible key)."""
    s = scores(q, k, causal)
    N, Nk = s.shape[-2], s.shape[-1]
    s = torch.nn.functional.pad(s, (0, (-Nk) % block, 0, (-N) % block), value=float("-inf"))
    ref = s.amax(-1, keepdim=True).clamp(min=-1e30)  # any common reference cancels in the ratio
    e = torch.exp(s - ref)
    p = (e / e.sum(-1, keepdim=True).clamp(min=1e-30)).to(torch.bfloat16).float()
    return s, ref, e, p


def block_flags(q, k, causal, threshold=1.0 / 16, block=64, margin=0.5):
    """docs/design-block-flags.md's bounds, in the forward's order: of the (block rows x block keys) tiles that hold
    a visible entry, the share that hold an entry with bf16(P) >= threshold ("needed"), the share that each bound
    would flag ("flagged", "flagged_quad", "flagged_final") and how many needed tiles it would miss ("missed...": 0
    for a sound bound). A row flags key block b when exp(rm_b) >= margin * threshold * L, rm_b being the block's
    row max of the scaled scores and L a lower bound of the row's total mass: the smallest of its four threads'
    running sums of exp(score) over blocks 0..b (thread t holds columns 8 n + 2 t, + 1 of each 64-key block, the
    wgmma accumulator layout), the row's running sum (the quad's), or the row's final sum (exp(LSE))."""
    s, ref, e, p = tiled_probs(q, k, causal, block)  # (B, H, rows, keys), padded to whole tiles
    B, H = s.shape[0], s.shape[1]
    nq, nk = s.shape[-2] // block, s.shape[-1] // block
    visible = torch.isfinite(s)
    tiles = lambda x: x.reshape(B, H, nq, block, nk, block)
    vis_tile = tiles(visible).any(5).any(3)
    need_tile = tiles(p >= threshold).any(5).any(3)
    eb = e.reshape(B, H, nq * block, nk, block // 8, 4, 2)  # (..., key block, n, thread t, e)
    l_t = eb.sum((4, 6)).cumsum(3)  # (B, H, rows, key blocks, thread): each thread's running mass
    rm_s = s.reshape(B, H, nq * block, nk, block).amax(-1)
    rm = torch.exp(rm_s - ref)
    out = {}
    # the thread's own mass (no reduction: the loosest, any thread flags), the row's (a quad sum per block) and
    # the row's final mass (exp(LSE), known once the row is done: the forward's epilogue)
    l_final = l_t.sum(-1)[..., -1:].expand(-1, -1, -1, nk)
    for name, l in (("", l_t.amin(-1)), ("_quad", l_t.sum(-1)), ("_final", l_final)):
        flag_row = torch.isfinite(rm_s) & (rm >= margin * threshold * l)  # a row with no visible key: no flag
        flag_tile = flag_row.reshape(B, H, nq, block, nk).any(3) & vis_tile
        out["flagged" + name] = flag_tile.sum().item() / vis_tile.sum().item()
        out["missed" + name] = int((need_tile & vis_tile & ~flag_tile).sum().item())
    out["needed"] = (need_tile & vis_tile).sum().item() / vis_tile.sum().item()
    return out


def warp_entries(q, k, causal, threshold=1.0 / 16, claims=2):
    """The list appends of the v3 backward kernels, per warp and 64 x 64 tile (a warp holds 16 keys x 64 queries;
    its thread (g, t) keys 16 w + g, + 8 and queries 8 n + 2 t, + 1, the layout of flash_bwd_wg.cuh): of the warp
    tiles that see a visible key, the share with an entry ("warps_with_entries"), the share whose threads hold more
    entries than the `claims` each claims early ("warps_with_rest"), that rest's mean where there is one and its
    max, and the rounds of atomics the rest takes where there is one: the slowest thread's rounds of four when each
    thread appends its own (v3.4-v3.21, "rounds_lane") and rounds of 32 when the warp shares them out (v3.22,
    "rounds_warp")."""
    s, _, _, p = tiled_probs(q, k, causal, 64)
    B, H = s.shape[0], s.shape[1]
    nq, nk = s.shape[-2] // 64, s.shape[-1] // 64
    # (B, H, query block, n, t, e, key block, w, half, g): query 64 qb + 8 n + 2 t + e, key 64 kb + 16 w + 8 half + g
    listed = (p >= threshold).reshape(B, H, nq, 8, 4, 2, nk, 4, 2, 8)
    per_thread = listed.sum((3, 5, 8))  # (B, H, qb, t, kb, w, g)
    rest = (per_thread - claims).clamp(min=0)
    warp_rest = rest.sum((3, 6))  # (B, H, qb, kb, w)
    rounds_lane = ((rest + 3) // 4).amax(6).amax(3)
    rounds_warp = (warp_rest + 31) // 32
    visible = torch.isfinite(s).reshape(B, H, nq, 64, nk, 4, 16).any(6).any(3)  # (B, H, qb, kb, w)
    has = (per_thread.sum((3, 6)) > 0) & visible
    more = (warp_rest > 0) & visible
    n_vis, n_more = visible.sum().item(), more.sum().item()
    return {"warps_with_entries": has.sum().item() / n_vis, "warps_with_rest": n_more / n_vis,
            "rest_mean": warp_rest[more].float().mean().item() if n_more else 0.0,
            "rest_max": int(warp_rest[visible].max().item()) if n_vis else 0,
            "rounds_lane": rounds_lane[more].float().mean().item() if n_more else 0.0,
            "rounds_warp": rounds_warp[more].float().mean().item() if n_more else 0.0}


def dq_warp_keys(q, k, causal, threshold=1.0 / 16, rows_per_warp=8, slots=8, p=None):
    """The listed entries' dK corrections in thresh_dq_kernel, whose warp walks 8 consecutive rows of one head
    (src/cuda/projection_tc.cuh) and sums them per key in a table of `slots` keys (8 at D = 128) before one atomic
    per key; an entry whose key finds no free slot is one atomic of its own. Per warp with an entry: the mean entries
    ("entries_per_warp") and distinct keys ("keys_per_warp"), the share of entries whose key another of the warp's
    entries also lists ("repeat_share"), the share that go straight to the atomics ("direct_share": the table takes
    the first `slots` keys in walk order, rows in order and each row's keys in ascending order, an approximation of
    the list's order) and the atomics per entry, the table's flush included ("atomics_per_entry"). A trailing
    partial warp is left out."""
    p = bf16_probs(q, k, causal) if p is None else p
    B, H, N, Nk = p.shape
    n = N // rows_per_warp * rows_per_warp
    listed = (p[..., :n, :] >= threshold).reshape(-1, rows_per_warp, Nk)  # (warps, rows, keys)
    listed = listed[listed.any(2).any(1)]
    if listed.shape[0] == 0:
        return {"entries_per_warp": 0.0, "keys_per_warp": 0.0, "repeat_share": 0.0, "direct_share": 0.0,
                "atomics_per_entry": 0.0}
    entries = listed.sum((1, 2)).float()
    present = listed.any(1)
    keys = present.sum(1).float()
    # walk order of each present key: (its first row, the key); the first `slots` of them hold the table's slots
    first_row = torch.where(present, listed.float().argmax(1), torch.full_like(keys[:, None], rows_per_warp).long())
    order = torch.where(present, first_row * Nk + torch.arange(Nk), torch.full_like(first_row, rows_per_warp * Nk))
    rank = order.argsort(1).argsort(1)
    in_table = present & (rank < slots)
    direct = (listed & ~in_table[:, None, :]).sum((1, 2)).float()
    flushes = in_table.sum(1).float()
    return {"entries_per_warp": entries.mean().item(), "keys_per_warp": keys.mean().item(),
            "repeat_share": 1 - keys.sum().item() / entries.sum().item(),
            "direct_share": direct.sum().item() / entries.sum().item(),
            "atomics_per_entry": (direct.sum() + flushes.sum()).item() / entries.sum().item()}


def cta_balance(q, k, causal, threshold=1.0 / 16, rows_per_warp=8, entry_cost=0.5, warps=(8, 4), p=None):
    """How long the warps of a thresh_dq CTA wait for its slowest at the barrier after their walk, in a model: a
    warp's time is its rows plus `entry_cost` rows per listed entry (0.5 from session 28's ncu times of v1.45: 97.7 us
    for Gaussian rows, which list nothing, 208.6 us for local rows of ~2.2 entries, over the same 262144 rows). For
    each CTA size (warps of `rows_per_warp` consecutive rows; 8 warps is the kernel's 64 rows, 4 would be 32-row
    CTAs): the share of the warps' time spent waiting, summed over CTAs with an entry ("idle_W"), and the mean of the
    slowest warp's time over the mean warp's ("max_over_mean_W"). A trailing partial CTA is left out."""
    p = bf16_probs(q, k, causal) if p is None else p
    B, H, N, Nk = p.shape
    per_row = (p >= threshold).sum(-1).float()  # (B, H, N)
    out = {}
    for w in warps:
        rows = w * rows_per_warp
        n = N // rows * rows
        if n == 0:
            out[f"idle_{w}"], out[f"max_over_mean_{w}"] = 0.0, 1.0
            continue
        t = (rows_per_warp + entry_cost * per_row[..., :n].reshape(-1, w, rows_per_warp).sum(-1))  # (CTAs, warps)
        busy = t > rows_per_warp  # a CTA counts when any of its warps has an entry
        t = t[busy.any(1)]
        if t.shape[0] == 0:
            out[f"idle_{w}"], out[f"max_over_mean_{w}"] = 0.0, 1.0
            continue
        slowest = t.max(1).values
        out[f"idle_{w}"] = (1 - t.sum() / (slowest.sum() * w)).item()
        out[f"max_over_mean_{w}"] = (slowest / t.mean(1)).mean().item()
    return out


def synthetic(N, D, q_scale=1.0, sink=False, local=False, H=2, seed=0):
    """The benchmark's inputs: Gaussian q, k; q_scale multiplies q; sink adds 4 to every q[..., 0] and sets key 0's
    first element to 24 (cuda_attention_bench.cc, --sink); local builds q_i = 0.6 (k_a + k_a+1 + k_a+2 + k_i +
    k_i-1 + k_i-2), a = 32 floor(i / 32), indices clamped to 0 .. i (--local, local_queries)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, N, H, D, generator=g) * q_scale
    k = torch.randn(1, N, H, D, generator=g)
    if sink:
        q[..., 0] += 4.0
        k[:, 0, :, 0] = 24.0
    if local:
        i = torch.arange(N)
        a = i // 32 * 32
        src = (a, torch.minimum(a + 1, i), torch.minimum(a + 2, i), i, (i - 1).clamp(min=0), (i - 2).clamp(min=0))
        q = 0.6 * sum(k[:, s] for s in src)
    return q.bfloat16().float(), k.bfloat16().float()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--state", nargs="*", default=[], help="attention state files (safetensors, BF16 q, k)")
    ap.add_argument("--n", type=int, default=4096, help="sequence length of the synthetic inputs")
    ap.add_argument("--d", type=int, default=128, help="head dimension of the synthetic inputs")
    ap.add_argument("--out", default=None, help="also write the Markdown here (atomically)")
    args = ap.parse_args(argv[1:])
    if args.n < 1 or args.d < 1:
        ap.error("--n and --d must be positive")
    rows = []

    def tables(q, k, causal):  # every table's numbers for one input, the rounded softmax formed once
        p = bf16_probs(q, k, causal)
        return {**row_entries(q, k, causal, p=p), **block_flags(q, k, causal), **warp_entries(q, k, causal),
                **dq_warp_keys(q, k, causal, p=p), **cta_balance(q, k, causal, p=p)}

    for path in args.state:
        q, k, causal = read_state(path)
        rows.append((f"{os.path.basename(path)} ({'causal' if causal else 'full'})", tables(q, k, causal)))
    for label, kw in (("Gaussian", {}), ("Gaussian, q x 2", {"q_scale": 2.0}), ("Gaussian, q x 4", {"q_scale": 4.0}),
                      ("Gaussian, sink at key 0", {"sink": True}),
                      ("local (queries from nearby keys)", {"local": True})):
        for causal in (False, True):
            q, k = synthetic(args.n, args.d, **kw)
            rows.append((f"{label}, N = {args.n}, D = {args.d} ({'causal' if causal else 'full'})",
                         tables(q, k, causal)))
    lines = [f"<!-- python3 {' '.join(argv)}; torch {torch.__version__}, Python {platform.python_version()}, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC -->",
             "| inputs | entries >= 1/16 per row | rows with one or more | mean max P | rows listing key 0 | "
             "64 x 64 tiles with an entry | tiles flagged by the running mass: thread's / row's; by the final mass | "
             "tiles with an entry not flagged |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['entries_per_row']:.2f} | {100 * r['rows_with_entries']:.1f}% | "
                     f"{r['mean_max_p']:.3f} | {100 * r['rows_listing_key0']:.1f}% | {100 * r['needed']:.1f}% | "
                     f"{100 * r['flagged']:.1f}% / {100 * r['flagged_quad']:.1f}%; {100 * r['flagged_final']:.1f}% | "
                     f"{r['missed'] + r['missed_quad'] + r['missed_final']} |")
    lines += ["", "The backward's list appends per warp and 64 x 64 tile (warp_entries):", "",
              "| inputs | warp tiles with an entry | with entries past each thread's two early claims | that rest: "
              "mean / max | its rounds of atomics: per thread, four at a time (v3.4-v3.21) / per warp, 32 (v3.22) |",
              "|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {100 * r['warps_with_entries']:.1f}% | {100 * r['warps_with_rest']:.1f}% | "
                     f"{r['rest_mean']:.1f} / {r['rest_max']} | {r['rounds_lane']:.2f} / {r['rounds_warp']:.2f} |")
    lines += ["", "The dQ postprocess's listed entries per warp of 8 rows with an entry, and its dK atomics "
              "(dq_warp_keys: a table of 8 keys per warp, D = 128):", "",
              "| inputs | entries / distinct keys per warp | entries whose key repeats in the warp | entries past the "
              "table (direct atomics) | atomics per entry, the table's flush included |",
              "|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['entries_per_warp']:.1f} / {r['keys_per_warp']:.1f} | "
                     f"{100 * r['repeat_share']:.0f}% | {100 * r['direct_share']:.0f}% | "
                     f"{r['atomics_per_entry']:.2f} |")
    lines += ["", "The dQ postprocess's warps waiting at its CTA's barrier after the walk, in a model (cta_balance: a "
              "warp's time is its 8 rows plus half a row per listed entry; CTAs with an entry):", "",
              "| inputs | warps' time waiting, 64-row CTAs (8 warps) / 32-row CTAs (4 warps) | slowest warp over the "
              "mean warp, 8 / 4 warps |",
              "|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {100 * r['idle_8']:.1f}% / {100 * r['idle_4']:.1f}% | "
                     f"{r['max_over_mean_8']:.2f} / {r['max_over_mean_4']:.2f} |")
    print_and_save("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main(sys.argv)
