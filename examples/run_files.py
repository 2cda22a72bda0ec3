# Opening a run folder's text files (examples/train_gpt.py writes them plain): a file committed under
# experiments/runs/ may be stored xz-compressed as NAME.xz instead (the large metrics.jsonl files are, so that the
# working tree stays small enough to travel to the GPU machine); readers take either, the plain file first.
import lzma
import os


def run_file_path(run, name):
    """The path of NAME in RUN (NAME or NAME.xz), or None when neither exists."""
    for path in (os.path.join(run, name), os.path.join(run, name + ".xz")):
        if os.path.exists(path):
            return path
    return None


def open_run_file(run, name):
    """NAME of run folder RUN opened for reading as text (NAME.xz decompressed); FileNotFoundError names both."""
    path = run_file_path(run, name)
    if path is None:
        raise FileNotFoundError(f"{os.path.join(run, name)} (nor {name}.xz there)")
    return lzma.open(path, "rt") if path.endswith(".xz") else open(path)
