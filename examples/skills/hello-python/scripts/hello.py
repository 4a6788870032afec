#!/usr/bin/env python3
"""Print a greeting, the interpreter version and every argument received."""
import platform
import sys


def main(argv: list[str]) -> int:
    print(f"Hello from Python {platform.python_version()}!")
    if len(argv) > 1:
        print(f"{len(argv) - 1} argument(s):")
        for i, arg in enumerate(argv[1:], 1):
            print(f"  {i}: {arg}")
    else:
        print("no arguments")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
