"""Where the installed package keeps what the engine reads at run time: the CLI binary
(bin/quantserve) and the data files (data/: default calibration and evaluation text).
The engine finds the data through QS_DATA_DIR (src/core/data_dir.h), set here before the
extension module loads, unless the user set it. A package imported from a source checkout
has no data/ beside it, and the engine then uses the source tree's."""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
BINARY = PACKAGE_DIR / "bin" / "quantserve"


def export_data_dir(env=os.environ):
    if DATA_DIR.is_dir() and not env.get("QS_DATA_DIR"):
        env["QS_DATA_DIR"] = str(DATA_DIR)
