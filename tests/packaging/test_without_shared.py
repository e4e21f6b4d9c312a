"""A clone without ``../shared``: its corpus tests skip with the reason, and CI refuses to run at all.

Both run as a user would, in their own process, with ``CDC_SHARED_DIR`` pointing at a folder that
does not exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO

MISSING = "/nonexistent/cdc-shared"


def _env() -> dict[str, str]:
    return {**os.environ, "CDC_SHARED_DIR": MISSING}


def test_corpus_tests_skip_with_the_reason_when_shared_is_absent():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "corpus", "-rs"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.fullmatch(r"\d+ skipped, \d+ deselected in [\d.]+s( \(.*\))?", summary), summary
    reason = (
        f"../shared not found at {MISSING}: the vendor samples and real-capture corpora live there "
        "(CDC_SHARED_DIR points to another folder)"
    )
    skipped = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all(reason in line for line in skipped), skipped[:3]


def test_ci_stops_before_installing_when_shared_is_absent():
    result = subprocess.run(
        ["bash", str(REPO / ".ci" / "run")],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"ci: {MISSING} not found: the vendor samples and real-capture corpora the corpus tests read "
        "live there (set CDC_SHARED_DIR to another folder)\n"
    )
