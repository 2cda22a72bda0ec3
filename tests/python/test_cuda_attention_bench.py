# bench/cuda_attention_bench.cc's argument checks, which run before any CUDA call (so here too, where the CUDA build
# exists without a GPU): a --shape outside the grid and other bad arguments are refused with exit status 2
# and a message that names the problem. Skipped where the CUDA benchmark is not built (scripts/build.sh without nvcc).
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "build", "release", "bench", "cuda_attention_bench")

pytestmark = pytest.mark.skipif(not os.access(BENCH, os.X_OK),
                                reason=f"{BENCH} not built (scripts/build.sh with nvcc present)")


def run(*args):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("shape", ["128:999:0", "64:4096", "32:1024:0", "128:4096:2", "128:32768:0", "x"])
def test_a_shape_outside_the_grid_is_refused(shape):
    r = run("--shape", shape, "--only", "gproj")
    assert r.returncode == 2
    assert f"--shape {shape} is not D:N:causal with D 64 or 128, N from 64 to 16384 dividing 16384" in r.stderr


@pytest.mark.parametrize("args, message", [(["--reps", "0"], "--reps must be at least 1"),
                                           (["--chain", "0"], "--chain must be 1 to 64"),
                                           (["--chain", "65"], "--chain must be 1 to 64"),
                                           (["--q-scale", "0"], "--q-scale must be in (0, 64]"),
                                           (["--local", "--sink"], "--local builds the queries itself"),
                                           (["--local", "--q-scale", "2"], "--local builds the queries itself"),
                                           (["--bogus"], "usage:")])
def test_bad_arguments_are_refused(args, message):
    r = run(*args)
    assert r.returncode == 2
    assert message in r.stderr
