"""`python -m replayssm_kit --version`: the kit's version, the same string `replayssm --version` prints."""
import argparse

from . import __version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="replayssm_kit",
                                     description="replayssm's Python kit (import replayssm_kit; docs/peer-conformance.md)")
    parser.add_argument("--version", action="version", version=f"replayssm_kit {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
