"""A Sphinx extension for the book's HTML: every script tag once.

sphinx-thebe 0.3 and sphinx-togglebutton register inline scripts (``const THEBE_JS_URL =
...``) both with Sphinx's registry and with the HTML builder, so Sphinx 7 puts them on
every page twice (once with the file name None, once with ""), and the second copy
fails in the browser with ``Identifier 'THEBE_JS_URL' has already been declared``. This
extension drops repeated scripts from each page's context before the page is written.
"""

from __future__ import annotations

from typing import Any


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


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", unique_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
