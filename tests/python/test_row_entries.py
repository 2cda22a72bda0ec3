# bench/row_entries.py: the count of softmax entries at or above thresh-lowrank's 1/16 on cases whose answer is
# known, and the state reader on a file written by the training program's writer. Part of scripts/python_test.sh.
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        audit = load("attention_audit", ROOT / "examples" / "attention_audit.py")
    finally:
        sys.path.pop(0)
    rows = load("row_entries", ROOT / "bench" / "row_entries.py")
    q, k = torch.randn(1, 8, 2, 16), torch.randn(1, 8, 1, 16)
    path = tmp_path / "s.safetensors"
    audit.write_state(str(path), {"q": q, "k": k, "v": k, "do": q}, {"causal": "true"})
    q2, k2, causal = rows.read_state(str(path))
    assert causal and torch.equal(q2, q.bfloat16().float()) and torch.equal(k2, k.bfloat16().float())
