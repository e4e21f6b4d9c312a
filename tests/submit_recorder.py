"""A stand-in ``spark3-submit`` that records the argument vector the Spark provider starts it with.

It writes the arguments to ``$CDC_TEST_ARGV_FILE`` and an empty ``_cdc_metrics.json`` into the
job's ``--output``, so a hook's submission can be checked without running Spark.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

RECORDER = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CDC_TEST_ARGV_FILE"], "w") as out:
    json.dump(args, out)
output = args[args.index("--output") + 1]
os.makedirs(output, exist_ok=True)
with open(os.path.join(output, "_cdc_metrics.json"), "w") as out:
    json.dump({{"rows": 0}}, out)
"""


def install_recorder(tmp_path: Path, monkeypatch) -> Path:
    """Put the recorder first on PATH as ``spark3-submit``; the file its next argument vector goes to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorder = bin_dir / "spark3-submit"
    recorder.write_text(RECORDER)
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CDC_TEST_ARGV_FILE", str(argv_file))
    return argv_file
