"""The options every tyro command line of the project (``python -m capsnotes``,
``benchmarks/``, ``tools/``) shares, declared once so that ``--device``, ``--data-root``
and ``--out`` read, default and are documented alike everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import tyro

#: ``--device``: where to run.
Device = Annotated[
    str, tyro.conf.arg(help="auto (a GPU if there is one), cpu, cuda or cuda:N")
]
#: ``--data-root``: where MNIST and Fashion-MNIST are (torchvision's layout).
DataRoot = Annotated[
    Optional[Path],  # noqa: UP045 (evaluated at run time on Python 3.10 by tyro)
    tyro.conf.arg(
        help="data folder (None: $CAPSNOTES_DATA, else ~/.cache/capsnotes/data)"
    ),
]
#: ``--out``: the folder a command writes into.
Out = Annotated[Path, tyro.conf.arg(help="output folder")]
