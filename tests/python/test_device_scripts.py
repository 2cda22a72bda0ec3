# The GPU machine's scripts (scripts/device_*.sh and the rest of scripts/*.sh): they only run there, so here every
# one is at least parsed by bash, and device_bench_ab.sh's refusals of a bad BENCHES list (which it checks before it
# touches a GPU) and pack_bench.sh's usage error are run. Part of scripts/python_test.sh.
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


def test_there_are_scripts():
    assert any(p.name == "device_check.sh" for p in SCRIPTS)
    assert any(p.name == "device_bench_ab.sh" for p in SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def run_ab(tmp_path, benches):
    """device_bench_ab.sh in a copy of the scripts it needs (so that no .prebuilt of this checkout is used)."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("device_bench_ab.sh", "device_env.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    env = dict(os.environ, BENCHES=benches, OUT=str(tmp_path / "out"), GPROJ_COMMIT="test")
    return subprocess.run(["bash", str(tree / "scripts" / "device_bench_ab.sh")], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=60)


def test_bench_ab_refuses_a_directory_without_commit(tmp_path):
    (tmp_path / "tree" / "old").mkdir(parents=True)
    r = run_ab(tmp_path, "old")
    assert r.returncode == 2
    assert "old/COMMIT is missing" in r.stderr


def test_bench_ab_refuses_a_directory_without_a_bench(tmp_path):
    d = tmp_path / "tree" / "old"
    d.mkdir(parents=True)
    (d / "COMMIT").write_text("abc\n")
    r = run_ab(tmp_path, "old")
    assert r.returncode == 2
    assert "old has neither bench.tar.xz nor pack.tar.xz" in r.stderr


def test_bench_ab_refuses_an_archive_without_the_bench(tmp_path):
    d = tmp_path / "tree" / "old"
    d.mkdir(parents=True)
    commit = f"test-{os.getpid()}-{tmp_path.name}"  # the script unpacks into /tmp/ab_bench/COMMIT
    (d / "COMMIT").write_text(commit + "\n")
    (tmp_path / "other").write_text("not a bench\n")
    subprocess.run(["tar", "cJf", str(d / "bench.tar.xz"), "-C", str(tmp_path), "other"], check=True)
    try:
        r = run_ab(tmp_path, "old")
    finally:
        shutil.rmtree(Path("/tmp/ab_bench") / commit, ignore_errors=True)
    assert r.returncode == 2
    assert "no cuda_attention_bench in old" in r.stderr


def test_pack_bench_needs_a_revision():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "pack_bench.sh")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "usage:" in r.stderr
