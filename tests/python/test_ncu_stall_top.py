# bench/ncu_stall_top.py: the stall summary of an ncu source-page CSV, on a small file whose answer is known, and
# its refusal of a file that is not one. Part of scripts/python_test.sh.
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("ncu_stall_top", ROOT / "bench" / "ncu_stall_top.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_csv(path):
    lines = [
        '"Kernel Name","void k(Params)",',
        '"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_wait",'
        '"stall_long_sb (Not Issued)"',
        '"0x10","IADD3 R1, R2, R3","10","8","2","8"',
        '"0x20","HGMMA.64x64x16","60","0","60","0"',
        '"0x30","REDG.E.ADD","30","25","5","25"',
    ]
    path.write_text("\n".join(lines) + "\n")


def test_shares_and_top_sites(tmp_path):
    top = load()
    f = tmp_path / "sass.csv"
    write_csv(f)
    total, reasons, sites = top.summarize(f, n=2)
    assert total == 100
    assert reasons == [("wait", pytest.approx(0.67)), ("long_sb", pytest.approx(0.33))]
    # the two largest, in address order, each with its two largest reasons ("Not Issued" columns left out)
    assert [(s[0], s[1], s[2]) for s in sites] == [(1, "0x20", pytest.approx(0.6)), (2, "0x30", pytest.approx(0.3))]
    assert sites[1][4] == [(25.0, "long_sb"), (5.0, "wait")]


def test_refuses_a_file_without_samples(tmp_path):
    f = tmp_path / "other.csv"
    f.write_text('"a","b"\n"1","2"\n')
    with pytest.raises(ValueError, match="not an ncu source-page CSV"):
        load().summarize(f)
