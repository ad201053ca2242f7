"""A Sphinx extension for the book's HTML: every script tag once, and the data of chapter
9's capsule explorer.

sphinx-thebe 0.3 and sphinx-togglebutton register inline scripts (``const THEBE_JS_URL =
...``) both with Sphinx's registry and with the HTML builder, so Sphinx 7 puts them on
every page twice (once with the file name None, once with ""), and the second copy
fails in the browser with ``Identifier 'THEBE_JS_URL' has already been declared``. This
extension drops repeated scripts from each page's context before the page is written.

After a successful build it puts chapter 9's capsule explorer into ``_static``: the page
script ``capsnotes-explorer.js`` (beside this file: in the book's ``_static`` folder Jupyter
Book would load it on every page) and ``capsnotes-explorer-data.js``, the decoder of the
model shipped in the package (:func:`capsbook.explorer.weights_script`). The test digits
the explorer shows are an output of chapter 9, rendered into its page like any other.
Chapter 5's routing playground, ``capsnotes-playground.js``, goes there too; its presets
are an output of chapter 5 (:func:`capsbook.playground.presets_html`).

The build installs neither PyTorch nor the package (``book/requirements.txt``): this
extension reads ``capsbook`` and the shipped weights from the checkout it builds, and
makes the decoder's data with numpy alone (:func:`capsbook.explorer.shipped_arrays`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

# The checkout being built, ahead of any installed copy: its book/ for capsbook, and its
# root for the capsnotes package's files (found there, never imported: it needs torch).
REPO = Path(__file__).resolve().parents[2]
for folder in (REPO, REPO / "book"):
    sys.path.insert(0, str(folder))

from capsbook.explorer import DATA_FILE, shipped_arrays, weights_script  # noqa: E402

EXPLORER_SCRIPT = "capsnotes-explorer.js"
PLAYGROUND_SCRIPT = "capsnotes-playground.js"


def unique_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        # an inline script has no file: None from one registration, "" from another
        key = (getattr(script, "filename", script) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def explorer_data(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    for script in (EXPLORER_SCRIPT, PLAYGROUND_SCRIPT):
        shutil.copyfile(Path(__file__).with_name(script), static / script)
    script = weights_script(*shipped_arrays("mnist"))
    (static / DATA_FILE).write_bytes(script.encode("ascii"))


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", unique_scripts, priority=900)
    app.connect("build-finished", explorer_data)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
