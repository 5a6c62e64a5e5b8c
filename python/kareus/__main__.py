# SPDX-License-Identifier: Apache-2.0
"""`kareus` on PATH after `pip install .` (and `python -m kareus`): runs the kareus program the
wheel carries beside this package (kareus/kareus-cli), with the same arguments and exit code."""
import os
import sys


def main():
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kareus-cli")
    if not os.access(program, os.X_OK):
        sys.stderr.write(f"kareus: {program} is missing: this kareus package was not installed "
                         "from a wheel (pip install .); in a build tree run build/apps/kareus/"
                         "kareus\n")
        return 2
    os.execv(program, [program, *sys.argv[1:]])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
