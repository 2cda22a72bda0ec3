# bench/row_entries.py: the count of softmax entries at or above thresh-lowrank's 1/16 on cases whose answer is
# known, and the state reader on a file written by the training program's writer. Part of scripts/python_test.sh.
import torch

from script_loader import ROOT, load


def test_counts_on_known_rows():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    D, N = 16, 32
    k = torch.zeros(1, N, 1, D)
    q = torch.zeros(1, N, 1, D)
    flat = rows.row_entries(q, k, causal=False)  # uniform rows: every P = 1/32 < 1/16
    assert flat["entries_per_row"] == 0 and flat["rows_with_entries"] == 0
    k[0, 0, 0, 0] = 100.0  # key 0 takes all of every row's mass
    q[..., 0] = 1.0
    sink = rows.row_entries(q, k, causal=False)
    assert sink["entries_per_row"] == 1 and sink["rows_listing_key0"] == 1 and sink["mean_max_p"] > 0.99
    causal = rows.row_entries(torch.zeros(1, N, 1, D), torch.zeros(1, N, 1, D), causal=True)
    # row i sees i + 1 keys with P = 1/(i + 1): at least 1/16 for the first 16 rows, each of those all of its keys
    assert abs(causal["entries_per_row"] - sum(range(1, 17)) / N) < 1e-6


def test_reads_a_state_written_by_the_training_program(tmp_path):
    audit = load("attention_audit", ROOT / "examples" / "attention_audit.py")
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    q, k = torch.randn(1, 8, 2, 16), torch.randn(1, 8, 1, 16)
    path = tmp_path / "s.safetensors"
    audit.write_state(str(path), {"q": q, "k": k, "v": k, "do": q}, {"causal": "true"})
    q2, k2, causal = rows.read_state(str(path))
    assert causal and torch.equal(q2, q.bfloat16().float()) and torch.equal(k2, k.bfloat16().float())


def test_block_flags_on_known_rows():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    D, N = 16, 96  # two query blocks x two key blocks (the second of each 32 wide)
    q, k = torch.zeros(1, N, 1, D), torch.zeros(1, N, 1, D)
    flat = rows.block_flags(q, k, causal=False)  # P = 1/96 everywhere: no tile needs the test
    assert flat["needed"] == 0 and flat["missed"] == 0 and flat["missed_quad"] == 0
    # the row's mass after block 0 is 64 (exp(0) / 64 = 1/64 < 1/32), after block 1 96; one thread's is only 16,
    # then 24 (1/16, 1/24 >= 1/32)
    assert flat["flagged_quad"] == 0 and flat["flagged_final"] == 0 and flat["flagged"] == 1
    k[0, 0, 0, 0] = 20.0  # key 0 takes every row's mass: only the tiles of key block 0 hold an entry
    q[..., 0] = 1.0
    sink = rows.block_flags(q, k, causal=False)
    assert sink["needed"] == 0.5 and sink["flagged_quad"] == 0.5 and sink["flagged_final"] == 0.5
    assert sink["missed"] == 0 and sink["missed_quad"] == 0 and sink["missed_final"] == 0
    assert sink["flagged"] == 1  # the threads without key 0 have almost no mass of their own


def test_block_flags_never_miss_a_tile_with_an_entry():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    g = torch.Generator().manual_seed(3)
    for scale in (0.5, 2.0, 6.0):
        for causal in (False, True):
            q = (torch.randn(1, 200, 2, 32, generator=g) * scale).bfloat16().float()
            k = torch.randn(1, 200, 1, 32, generator=g).bfloat16().float()
            r = rows.block_flags(q, k, causal)
            assert r["missed"] == 0 and r["missed_quad"] == 0 and r["missed_final"] == 0, (scale, causal, r)
            assert r["needed"] <= r["flagged_final"] <= r["flagged_quad"] <= r["flagged"] <= 1


def test_warp_entries_on_a_sink():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    D, N = 16, 128  # two query blocks x two key blocks: 8 warp tiles
    q, k = torch.zeros(1, N, 1, D), torch.zeros(1, N, 1, D)
    flat = rows.warp_entries(q, k, causal=False)  # P = 1/128: nothing listed
    assert flat["warps_with_entries"] == 0 and flat["warps_with_rest"] == 0 and flat["rest_max"] == 0
    k[0, 0, 0, 0] = 20.0  # key 0 takes every row's mass: warp 0 of key block 0, its lanes g = 0 (four of them)
    q[..., 0] = 1.0
    sink = rows.warp_entries(q, k, causal=False)
    # per query block: 64 entries in four lanes (16 each), 14 past the two claims each
    assert sink["warps_with_entries"] == 2 / 16 and sink["warps_with_rest"] == 2 / 16
    assert sink["rest_mean"] == 56 and sink["rest_max"] == 56
    assert sink["rounds_lane"] == 4 and sink["rounds_warp"] == 2
    # causal, one tile: row i lists keys 0..i while 1/(i + 1) >= 1/16 (rows 0..15), all in warp 0 (keys 0..15);
    # thread (g, t): keys g, g + 8 and queries 8 n + 2 t + e, counted here entry by entry
    causal = rows.warp_entries(torch.zeros(1, 64, 1, D), torch.zeros(1, 64, 1, D), causal=True)
    rest = 0
    for g in range(8):
        for t in range(4):
            mine = sum(1 for j in (g, g + 8) for n in range(8) for e in range(2) if j <= 8 * n + 2 * t + e <= 15)
            rest += max(0, mine - 2)
    assert causal["warps_with_entries"] == 1 / 4 and causal["rest_max"] == rest and causal["rest_mean"] == rest
    assert causal["warps_with_rest"] == (1 / 4 if rest else 0)


def test_dq_warp_keys_on_known_rows():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    D, N = 16, 32  # four warps of 8 rows
    q, k = torch.zeros(1, N, 1, D), torch.zeros(1, N, 1, D)
    none = rows.dq_warp_keys(q, k, causal=False)  # P = 1/32 everywhere: no entry, no warp counted
    assert none["entries_per_warp"] == 0 and none["atomics_per_entry"] == 0
    k[0, 0, 0, 0] = 100.0  # a sink: every row lists key 0 alone, one key per warp, one atomic per 8 entries
    q[..., 0] = 1.0
    sink = rows.dq_warp_keys(q, k, causal=False)
    assert sink["entries_per_warp"] == 8 and sink["keys_per_warp"] == 1
    assert sink["repeat_share"] == 7 / 8 and sink["direct_share"] == 0 and sink["atomics_per_entry"] == 1 / 8
    # row i lists key i alone (a diagonal of distinct keys): 8 keys per warp fill the 8 slots, 1 atomic per entry;
    # with 4 slots half the entries go straight to the atomics and the flush adds 4 per warp
    q, k = torch.zeros(1, N, 1, N), torch.eye(N).reshape(1, N, 1, N) * 100.0
    q[0, :, 0, :] = torch.eye(N)
    diag = rows.dq_warp_keys(q, k, causal=False)
    assert diag["entries_per_warp"] == 8 and diag["keys_per_warp"] == 8 and diag["repeat_share"] == 0
    assert diag["direct_share"] == 0 and diag["atomics_per_entry"] == 1
    few = rows.dq_warp_keys(q, k, causal=False, slots=4)
    assert few["direct_share"] == 0.5 and few["atomics_per_entry"] == 1


def test_local_queries_list_their_own_keys():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    q, k = rows.synthetic(256, 128, local=True)
    # q_i is built from six keys of its own segment and neighbourhood: those dominate row i's scores
    s = q[0, :, 0] @ k[0, :, 0].T
    i = torch.arange(256)
    assert (s.argmax(1) - i).abs().le(i % 32 + 2).float().mean() > 0.99
    r = rows.dq_warp_keys(q, k, causal=True)
    assert r["repeat_share"] > 0.4 and r["entries_per_warp"] > 8
    plain = rows.dq_warp_keys(*rows.synthetic(256, 128, q_scale=4.0), causal=False)
    assert plain["repeat_share"] < 0.1  # Gaussian rows list keys that do not repeat


def test_cta_balance_on_known_rows():
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    N, D = 64, 16  # one 64-row CTA, or two of 32 rows
    q, k = torch.zeros(1, N, 1, D), torch.zeros(1, N, 1, D)
    none = rows.cta_balance(q, k, causal=False)  # P = 1/64 everywhere: no entry, no CTA counted
    assert none["idle_8"] == 0 and none["max_over_mean_8"] == 1
    # rows 0-7 (warp 0) list key 0 alone, the others nothing: warp 0 takes 8 + 0.5 x 8 = 12 row times, the rest 8
    k[0, 0, 0, 0] = 100.0
    q[0, :8, 0, 0] = 1.0
    one = rows.cta_balance(q, k, causal=False)
    assert abs(one["idle_8"] - (1 - 68 / 96)) < 1e-6 and abs(one["max_over_mean_8"] - 12 / 8.5) < 1e-6
    # 32-row CTAs: only the first has an entry, and its four warps wait 1 - 36 / 48 of their time
    assert abs(one["idle_4"] - 0.25) < 1e-6 and abs(one["max_over_mean_4"] - 12 / 9) < 1e-6
    # every warp alike: nobody waits
    q[0, :, 0, 0] = 1.0
    even = rows.cta_balance(q, k, causal=False)
    assert abs(even["idle_8"]) < 1e-6 and abs(even["idle_4"]) < 1e-6

