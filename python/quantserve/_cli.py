"""The `quantserve` console script: runs the CLI binary the package ships (bin/quantserve)
with the same arguments, in place of this process, so signals, exit codes, stdout and stderr
are the binary's own (serve's SIGTERM handling included)."""

import os
import sys

from ._paths import BINARY, export_data_dir


def main() -> None:
    if not BINARY.is_file():
        sys.exit(f"quantserve: the CLI binary is missing from the package ({BINARY}); "
                 "reinstall quantserve")
    export_data_dir()
    os.execv(BINARY, [str(BINARY), *sys.argv[1:]])


if __name__ == "__main__":
    main()
