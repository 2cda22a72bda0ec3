# The repository's scripts (bench/*.py, scripts/*.py, examples/*.py) are not a package: tests import them from
# their paths with this helper (every test that does).
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name, path):
    """The module at `path` under the name `name`, its own folder on sys.path while it runs (a script's imports of
    its neighbours)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(path).parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module
