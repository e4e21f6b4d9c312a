"""An interpreter that has this venv's third-party packages but not ``airflow_cdc_provider``.

For Spark processes that must get the package from what the job ships (``--py-files``, Spark
Connect artifacts) rather than from their own Python.
"""

from __future__ import annotations

import site
import subprocess
import venv
from pathlib import Path


def python_without_the_package(folder: Path) -> Path:
    """A venv in ``folder`` whose interpreter sees this venv's site-packages but not the package.

    A ``.pth`` line puts this venv's site-packages on its path; ``.pth`` files found there are not
    run, so the editable install's finder (a ``.pth`` import) is not installed: the package is not
    importable, while PySpark, pyarrow, pandas and fastavro are.
    """
    venv.EnvBuilder(with_pip=False, system_site_packages=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    own_site = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(own_site, "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    probe = "import pyarrow, pandas, fastavro, pyspark\ntry:\n import airflow_cdc_provider\nexcept ImportError: print('absent')"
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=folder, check=True)
    assert result.stdout.strip() == "absent", result.stdout + result.stderr
    return python
