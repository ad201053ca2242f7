"""Ship a finished training run as a pretrained model of the package.

    python tools/ship_pretrained.py runs/mnist-paper-cpu            # as "mnist"
    python tools/ship_pretrained.py RUN_DIR --name mnist --data-root PATH

Writes capsnotes/weights/<name>.safetensors (float16) and <name>.json (the run's
provenance and history), after checking that the stored weights score within 0.1 point
of the run's final test accuracy on the whole test set. See capsnotes/pretrained.py.
"""

from __future__ import annotations

import argparse
import sys

from capsnotes.pretrained import PRETRAINED, pretrained_files, save_pretrained


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a folder written by python -m capsnotes train")
    parser.add_argument("--name", default="mnist", choices=sorted(PRETRAINED))
    parser.add_argument("--data-root", help="data folder (default: $CAPSNOTES_DATA)")
    args = parser.parse_args(argv)
    try:
        record = save_pretrained(args.run_dir, args.name, data_root=args.data_root)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    weights, provenance = pretrained_files(args.name)
    shipped = record["shipped"]
    print(
        f"{weights} ({shipped['bytes'] / 1e6:.1f} MB, {shipped['dtype']}) and {provenance.name}: "
        f"test accuracy {shipped['test_accuracy']:.4f} after loading, "
        f"{record['epochs'][-1]['test_accuracy']:.4f} in training"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
