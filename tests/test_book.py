"""The book. Three checks of the committed files: each chapter's notebook is its MyST
source as Colab reads it; it installs the commit whose package made its outputs; the
README's two commands, the second of which is .ci/run's last line. The rest is
behaviour: when a notebook is stale (on a repository of the test's own), how
tools/colab.py writes MyST as Markdown (and refuses a cell that Colab would run but a
runner skips) and tools/refresh_notebooks.py executes, writes and pins notebooks and
writes the README's figure (on small inputs), and (slow) a full `jupyter-book build book`
from a fresh copy with warnings as errors."""

from __future__ import annotations

import ast
import functools
import html
import re
import subprocess
import sys
from pathlib import Path

import grimp
import jupytext
import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

from tests.book_build import build_book, fresh_copy
from tests.conftest import REPO
from tools import refresh_notebooks
from tools.refresh_notebooks import git

sys.path.insert(0, str(REPO / "tools"))
import colab  # noqa: E402  (the module tools/refresh_notebooks.py imports as colab)
from colab import (  # noqa: E402
    Chapter,
    References,
    chapter_sources,
    chapters,
    colab_cells,
    glued_values,
    myst_left_in,
)

BOOK = REPO / "book"
CONFIG = yaml.safe_load((REPO / "_config.yml").read_text())
COMMIT = re.compile(r'^COMMIT = "([0-9a-f]{40})"', re.M)


def notebook(source):
    return nbformat.read(source.with_suffix(".ipynb"), as_version=4)


def notebook_metadata(metadata: dict) -> dict:
    """What Colab reads of a notebook's metadata (kernel, runtime, accelerator): all but
    jupytext's and the refresh's own records."""
    return {k: v for k, v in metadata.items() if k not in ("jupytext", "capsnotes")}


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_the_notebook_is_its_source_as_colab_reads_it(source):
    """Same code cells, same metadata (the chapters that train ask Colab for a GPU there);
    markdown cells as tools/colab.py writes them, with no MyST left for Colab to show raw."""
    paired = source.with_suffix(".ipynb")
    assert paired.is_file(), f"{paired.name} is missing: run python tools/refresh_notebooks.py"
    committed = notebook(source)
    nbformat.validate(committed)
    book = chapters()
    glued = glued_values(committed.cells)
    read = jupytext.read(source)
    expected = colab_cells(read.cells, book[source.stem], book, References(), glued)
    left = [m for c in expected if c.cell_type == "markdown" for m in myst_left_in(c.source)]
    assert left == [], f"{source.name}: tools/colab.py leaves MyST that Colab shows raw: {left}"

    def cells(cells):
        return [
            (
                c.cell_type,
                c.source,
                c.metadata.get("tags", []),
                c.metadata.get("mystnb"),
                c.metadata.get("cellView"),
            )
            for c in cells
        ]

    assert cells(expected) == cells(committed.cells), (
        f"{source.name} and {paired.name} differ: run python tools/refresh_notebooks.py "
        f"{source.stem[:2]}"
    )
    assert notebook_metadata(committed.metadata) == notebook_metadata(read.metadata), (
        f"{source.name} and {paired.name} have different metadata: run "
        f"python tools/refresh_notebooks.py {source.stem[:2]}"
    )
    assert committed.metadata["kernelspec"]["name"] == "python3"


def project_table(pyproject: str) -> str:
    """The lines of pyproject.toml's ``[project]`` table, up to the next table."""
    table = re.search(r"^\[project\]\n(.*?)(?=^\[)", pyproject + "\n[", re.M | re.S)
    assert table, "pyproject.toml has no [project] table"
    return table.group(1)


def chapter_code(source) -> str:
    """The chapter's code cells as one Python text (IPython magics left out)."""
    cells = [c.source for c in jupytext.read(source).cells if c.cell_type == "code"]
    lines = "\n".join(cells).splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def package_files_used(code: str) -> set[str]:
    """The files of capsnotes and capsbook that ``code`` runs when it imports from them:
    every module it imports, the packages' ``__init__.py`` (which importing any of them
    runs), everything those import in turn (grimp, import-linter's graph), and the shipped
    weights where ``capsnotes.training.pretrained`` is among them."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
    if not imported:
        return set()
    graph = import_graph()
    modules: set[str] = set()
    todo = set(imported)
    while todo:  # importing a.b.c runs a/__init__.py and a/b/__init__.py too
        module = todo.pop()
        parts = module.split(".")
        found = {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
        found |= graph.find_upstream_modules(module)
        todo |= found - modules - {module}
        modules |= found
    files = {module_file(m) for m in modules}
    if "capsnotes.training.pretrained" in modules:
        files.add("capsnotes/training/weights")
    return files


@functools.cache
def import_graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES)


#: The packages a chapter runs, and where their files are.
PACKAGES = {"capsnotes": "capsnotes", "capsbook": "book/capsbook"}


def module_file(module: str) -> str:
    """The repository path of ``module``'s file."""
    root, *rest = module.split(".")
    path = "/".join([PACKAGES[root], *rest])
    return f"{path}/__init__.py" if (REPO / path).is_dir() else f"{path}.py"


def changed_since(commit: str, code: str, repo: Path = REPO) -> str:
    """What of the package that the chapter ``code`` runs has changed in ``repo`` since
    ``commit`` (git's --stat of those files, and a line where pyproject.toml's [project]
    table changed): empty while the outputs that ``commit`` made still hold. What a reader
    installs is the package and the requirements in its [project] table; pytest's
    settings and the extras do not change a chapter's outputs."""
    used = sorted(package_files_used(code))
    changed = git(repo, "diff", "--stat", commit, "--", *used) if used else ""
    pinned = git(repo, "show", f"{commit}:pyproject.toml")
    if project_table(pinned) != project_table((repo / "pyproject.toml").read_text()):
        changed += "pyproject.toml: the [project] table (name, version, requirements)\n"
    return changed


def make_repository(repo: Path, files: dict[str, str]) -> str:
    """A git repository at ``repo`` holding ``files`` (path -> text) in one commit, whose
    hash it returns."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    who = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
    git(repo, *who, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "outputs made here")
    return git(repo, "rev-parse", "HEAD").strip()


def test_a_notebook_is_stale_only_when_code_it_runs_changed(tmp_path):
    """A repository of the test's own, committed once (the commit that made a chapter's
    outputs), then one file changed at a time: the chapter is stale when the change is to
    a file its imports run (the package's __init__ runs squash.py; a capsbook helper; the
    shipped weights, for a chapter that loads them) or to the requirements, and not when
    it is to the command line, a benchmark, pytest's settings, or, for a chapter that
    imports nothing of the package, any file of it (its requirements it still installs)."""
    pyproject = '[project]\nname = "capsnotes"\ndependencies = ["torch>=2.11"]\n\n'
    pyproject += '[tool.pytest.ini_options]\naddopts = "-n 2"\n'
    files = {
        "pyproject.toml": pyproject,
        "capsnotes/__init__.py": "",
        "capsnotes/squash.py": "",
        "capsnotes/training/cli.py": "",
        "capsnotes/training/weights/mnist.json": "{}",
        "benchmarks/floor.py": "",
        "book/capsbook/display.py": "",
        "README.md": "",
    }
    repo = tmp_path / "repo"
    commit = make_repository(repo, files)
    chapters_code = {
        "data": "from capsnotes.data import load_dataset",
        "pretrained": "from capsnotes.training.pretrained import load_pretrained",
        "display": "import capsbook.display",
        "none": "print(2 + 2)",
    }

    def stale_after(name: str, text: str) -> set[str]:
        """The chapters that changing ``name`` to ``text`` makes stale (then undone)."""
        (repo / name).write_text(text)
        try:
            return {c for c, code in chapters_code.items() if changed_since(commit, code, repo)}
        finally:
            (repo / name).write_text(files[name])

    assert {c for c, code in chapters_code.items() if changed_since(commit, code, repo)} == set()
    for unrelated in ("capsnotes/training/cli.py", "benchmarks/floor.py", "README.md"):
        assert stale_after(unrelated, "changed = True\n") == set(), unrelated
    tooling = pyproject.replace('"-n 2"', '"-n 4"')
    assert stale_after("pyproject.toml", tooling) == set()
    everything = {"data", "pretrained", "display"}  # each runs capsnotes/__init__.py
    assert stale_after("capsnotes/squash.py", "changed = True\n") == everything
    requirements = pyproject.replace("2.11", "2.12")
    assert stale_after("pyproject.toml", requirements) == everything | {"none"}
    assert stale_after("capsnotes/training/weights/mnist.json", '{"new": 1}') == {"pretrained"}
    assert stale_after("book/capsbook/display.py", "changed = True\n") == {"display"}
    (repo / "capsnotes/squash.py").write_text("changed = True\n")  # and what it says
    assert " capsnotes/squash.py | 1 +" in changed_since(commit, chapters_code["data"], repo)


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_notebooks_are_executed_and_install_the_commit_of_their_outputs(source):
    """The install cell pins the commit whose package made the outputs: that commit is
    in the history (this needs a full clone), and nothing the chapter runs of the
    package has changed since."""
    committed = notebook(source)
    code = [c for c in committed.cells if c.cell_type == "code"]
    # A cell the build does not run (a long training run for the reader to start) says
    # so to nbval too, and is at least valid Python.
    for cell in code:
        if "skip-execution" in cell.metadata.get("tags", []):
            assert "nbval-skip" in cell.metadata["tags"], "a cell the build skips, nbval must skip"
            compile(cell.source, f"{source.stem}, a cell run by hand", "exec")
        else:
            assert cell.execution_count is not None, "committed without outputs"
    first = code[0].source
    assert 'if "google.colab" in sys.modules:' in first and "pip" in first
    assert "capsnotes @ git+" + CONFIG["repository"]["url"] + "@{COMMIT}" in first
    (commit,) = COMMIT.findall(first)
    assert commit in source.read_text(), "the source and its notebook pin different commits"
    history = subprocess.run(["git", "cat-file", "-t", commit], cwd=REPO, capture_output=True)
    assert history.returncode == 0, (
        f"commit {commit[:12]}, which made the outputs of {source.name}, is not in this "
        "clone's history: on a shallow clone, git fetch --unshallow"
    )
    changed = changed_since(commit, chapter_code(source))
    assert not changed, (
        f"code {source.name} runs changed since {commit[:12]}, which made its outputs: "
        f"run python tools/refresh_notebooks.py {source.stem[:2]}\n{changed}"
    )


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    """The build installs book/requirements.txt alone, which names neither PyTorch nor the
    package (the build reads what it needs of them without: tests/test_explorer.py); the
    test command is .ci/run's last line, character for character."""
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme)
    assert len(commands) >= 2
    build, test = commands[0], commands[1]
    assert build.endswith("jupyter-book build book")
    installs = [i.strip() for i in re.findall(r"pip install ([^&\n]+)", build)]
    assert installs == ["uv", "-r book/requirements.txt"], build
    lines = (BOOK / "requirements.txt").read_text().splitlines()
    names = {re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0].lower() for line in lines}
    assert not names & {"torch", "torchvision", "capsnotes"}, names
    assert "pytest --nbval" in test and "pip install" in test
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test, ".ci/run must run the README's test command unchanged"


@pytest.mark.slow
def test_the_book_builds_from_a_fresh_copy_without_warnings(built_book):
    """Offline and without MNIST (tests/book_build.py): every chapter page, with its Colab
    button and its committed outputs; math served locally; the figures numbered as the
    Colab notebook numbers them (tools/colab.py reads the same table of contents)."""
    owner_repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    assert CONFIG["execute"]["execute_notebooks"] == "off"
    for source in chapter_sources():
        page = (built_book / f"{source.stem}.html").read_text()
        link = f"colab.research.google.com/github/{owner_repo}/blob/main/book/{source.stem}.ipynb"
        assert link in page, f"{source.stem}.html has no Colab link to its notebook"
        assert "Traceback" not in page and "cell_output" in page, source.stem
        assert "cdn.jsdelivr" not in page and "cdnjs.cloudflare" not in page
        if 'class="math' in page:
            assert 'src="_static/mathjax/tex-chtml.js"' in page, f"{source.stem}: no local MathJax"
        assert page.count("THEBE_JS_URL =") <= 1
        # every figure and every printed output of the committed notebook is on the page
        cells = notebook(source).cells
        hidden = {"remove-output", "remove-cell"}
        shown = [c for c in cells if not hidden & set(c.metadata.get("tags", []))]
        outputs = [o for c in shown for o in c.get("outputs", [])]
        pictures = sum("image/png" in o.get("data", {}) for o in outputs)
        assert page.count('src="_images/') >= pictures, source.stem
        for output in outputs:
            # the kernel may flush a print's newline as a stream of its own
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                if not output["text"].strip():
                    continue
                first = output["text"].strip().splitlines()[0]
                assert html.escape(first, quote=False) in page, (source.stem, first)
        in_colab = [
            number
            for c in cells
            if c.cell_type == "markdown"
            for number in re.findall(r"^\*\*Fig\. ([\d.]+)\*\*", c.source, re.M)
        ]
        assert re.findall(r'caption-number">Fig\. ([\d.]+)', page) == in_colab, source.stem
    figures = sum(
        (built_book / f"{s.stem}.html").read_text().count("<figure") for s in chapter_sources()
    )
    assert figures >= 15
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()


@pytest.mark.slow
def test_a_notebook_out_of_step_with_its_source_stops_the_build_by_name(tmp_path):
    """A code cell changed in the MyST source but not in its notebook: the build refuses
    to render the old outputs and names the chapter and the command that refreshes it."""
    repo = fresh_copy(tmp_path / "repo")
    source = repo / "book" / "02_squash.md"
    line = 'if "google.colab" in sys.modules:'
    source.write_text(source.read_text().replace(line, line + "  # changed", 1))
    html_folder, result = build_book(tmp_path)
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert "02_squash.ipynb was not made from the current 02_squash.md" in said, said[-3000:]
    assert "python tools/refresh_notebooks.py 02" in said
    assert not (html_folder / "02_squash.html").exists()


def test_figure_captions_become_numbered_text_after_each_figure_for_colab():
    """A figure's caption (cell metadata, which Colab does not show) opens the markdown
    cell after it, numbered as the HTML numbers it: chapter, then figure. A figure with
    no text after it is refused."""
    book = chapters()
    chapter = book["08_training"]

    def figure(caption: str):
        return new_code_cell("plot()", metadata={"mystnb": {"figure": {"caption": caption}}})

    cells = [
        new_markdown_cell("Before."),
        figure("The loss,\n  epoch by epoch."),
        new_markdown_cell("After the first."),
        new_code_cell("x = 1"),
        figure("The accuracy, read from {cite:t}`sabour2017`."),
        new_markdown_cell("After the second."),
    ]
    out = colab_cells(cells, chapter, book, References())
    texts = [c.source for c in out if c.cell_type == "markdown"]
    n = chapter.number
    assert texts[0] == "Before."
    assert texts[1] == f"**Fig. {n}.1** The loss, epoch by epoch.\n\nAfter the first."
    assert texts[2].startswith(f"**Fig. {n}.2** The accuracy, read from Sabour et al. (")
    assert texts[2].endswith("\n\nAfter the second.") and myst_left_in(texts[2]) == []
    with pytest.raises(ValueError, match="a figure must be followed by text, cell 1 is code"):
        colab_cells([figure("A."), new_code_cell("x = 1")], chapter, book, References())
    with pytest.raises(ValueError, match="the last figure needs a markdown cell after it"):
        colab_cells([new_markdown_cell("Text."), figure("A.")], chapter, book, References())


def test_equations_links_and_citations_become_plain_markdown_for_colab(tmp_path, monkeypatch):
    """Equation references become the numbers the HTML shows, with \\tag in the equation;
    a link to a chapter a link to its hosted page; a citation author and year. A role or
    directive with no Colab form is refused by name, and what is left unconverted,
    myst_left_in finds (the check on every chapter's notebook relies on it)."""
    book = chapters()
    monkeypatch.setattr(colab, "BOOK", tmp_path)  # where the chapter's equation labels are
    (tmp_path / "x.md").write_text("$$\na\n$$ (first)\n\ntext\n\n$$\nb\n$$ (second)\n")
    chapter = Chapter("x", 6, "X")
    text = (
        "$$\nb\n$$ (second)\n\nBy {eq}`second`, as {doc}`the squash <02_squash>` and "
        "{doc}`02_squash` show and {cite:t}`sabour2017` found {cite:p}`sabour2017`."
    )
    refs = References()
    out = colab.colab_markdown(text, chapter, book, refs)
    squash = f"{colab.HOSTED}/02_squash.html"
    assert out.startswith("$$\nb\n\\tag{6.2}\n$$\n\nBy (6.2), as [the squash](" + squash)
    assert f"and [{book['02_squash'].title}]({squash}) show" in out
    assert "and Sabour et al. ([2017](" in out and "found ([Sabour et al., 2017](" in out
    assert myst_left_in(out) == []
    with pytest.raises(ValueError, match=r"x\.md: no Colab form for the role \{numref\}"):
        colab.colab_markdown("See {numref}`fig-a`.", chapter, book, refs)
    with pytest.raises(ValueError, match=r"x\.md: no Colab form for the directive \{figure\}"):
        colab.colab_markdown("```{figure} a.png\n```", chapter, book, refs)
    raw = "(target)=\n\n{eq}`first`\n\n$$\na\n$$ (first)\n\n```{note}\nN.\n```"
    assert myst_left_in(raw) == ["{eq}`", "```{", "$$ (first)", "(target)=\n"]


def test_glued_numbers_become_text_for_colab():
    """What the HTML pastes from an output, the Colab notebook carries as text."""
    book = chapters()
    chapter = book["02_squash"]
    record = {"scrapbook": {"name": "accuracy", "mime_prefix": "application/papermill.record/"}}
    code = new_code_cell(
        "glue('accuracy', 0.99312)",
        outputs=[
            new_output(
                "display_data",
                data={"application/papermill.record/text/plain": "0.99312"},
                metadata=record,
            )
        ],
    )
    glued = glued_values([code])
    assert glued == {"accuracy": "0.99312"}
    text = "It reads {glue:text}`accuracy:.2%` of them ({glue:text}`accuracy`)."
    cells = colab_cells([new_markdown_cell(text), code], chapter, book, References(), glued)
    assert cells[0].source == "It reads 99.31% of them (0.99312)."
    assert myst_left_in(cells[0].source) == []
    with pytest.raises(ValueError, match="no glued value 'accuracy'"):
        colab_cells([new_markdown_cell(text)], chapter, book, References(), {})


def test_admonitions_become_quotes_and_collapsed_boxes_for_colab():
    book = chapters()
    text = (
        "```{admonition} How this was measured\n:class: dropdown\n\nRead from "
        "{cite:p}`sabour2017`.\n```\n\n```{note}\nTwo lines\nof a note.\n```"
    )
    (cell,) = colab_cells([new_markdown_cell(text)], book["02_squash"], book, References())
    assert cell.source.startswith("<details><summary>How this was measured</summary>")
    assert "Read from (" in cell.source and "</details>" in cell.source
    assert "> **Note**\n>\n> Two lines\n> of a note." in cell.source
    assert myst_left_in(cell.source) == []


def test_glue_keeps_nothing_where_myst_nb_is_missing(monkeypatch):
    from capsbook.display import glue

    calls = []
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # as on Colab: import fails
    assert glue("x", 3.5, ".1f") is None  # nothing kept, nothing raised
    fake = type(sys)("myst_nb")
    fake.glue = lambda *args, **kwargs: calls.append((args, kwargs))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    # Where MyST-NB is there it keeps the text the page shows, without displaying it, and
    # returns nothing, so a cell ending in glue(...) prints no stray value.
    assert glue("x", 3.456, ".1%") is None and glue("n", 7) is None
    assert calls == [(("x", "345.6%"), {"display": False}), (("n", 7), {"display": False})]
    with pytest.raises(ValueError, match="needs the format the prose shows it in"):
        glue("y", 0.1234)


def test_bookkeeping_left_out_of_the_html_is_a_titled_form_in_colab():
    """A cell tagged remove-cell (the glue calls and the checks of the text) runs and is
    left out of the HTML; Colab, which honours no tags, shows it collapsed under its
    title, and an untitled one is refused."""
    book = chapters()
    title = "#@title Bookkeeping: the numbers the text quotes\nglue('x', 1)"
    cell = new_code_cell(title, metadata={"tags": ["remove-cell"]})
    (colab_cell,) = colab_cells([cell], book["02_squash"], book, References())
    assert colab_cell.metadata["cellView"] == "form"
    untitled = new_code_cell("glue('x', 1)", metadata={"tags": ["remove-cell"]})
    with pytest.raises(ValueError, match="needs a #@title line"):
        colab_cells([untitled], book["02_squash"], book, References())


@pytest.mark.parametrize("tag", ["skip-execution", "nbval-skip", "remove-cell-execution"])
def test_a_cell_a_runner_would_skip_is_refused_for_colab(tag):
    """Colab's Run all honours no tag: a cell tagged to be left out (by the book's build
    or by nbval) would run there although the test machine never ran it, so the Colab
    form of a chapter with one is refused, naming the cell and the tag. Every chapter's
    notebook is made by this function, and checked against it (the first test here)."""
    book = chapters()
    training = new_code_cell("train_for_hours()", metadata={"tags": [tag, "hide-input"]})
    cells = [new_markdown_cell("Text."), new_code_cell("x = 1"), training]
    with pytest.raises(ValueError, match=rf"02_squash: cell 2 is tagged {tag}, but Colab"):
        colab_cells(cells, book["02_squash"], book, References())
    guarded = new_code_cell("if GPU:\n    train_for_hours()", metadata={"tags": ["hide-input"]})
    assert colab_cells([guarded], book["02_squash"], book, References())[0].source.startswith("if")


#: A chapter's MyST source, small: an install cell with its pin, prose, one code cell.
SMALL_CHAPTER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A small chapter

```{code-cell} ipython3
COMMIT = ""
```

As {doc}`the squash <02_squash>` says.

```{code-cell} ipython3
print(6 * 7)
```
"""


def test_a_refresh_needs_the_package_committed_and_pins_its_commit(tmp_path, monkeypatch):
    """The commit a refresh pins is HEAD, and only while the package (capsnotes,
    capsbook, pyproject.toml) has no uncommitted change: a change elsewhere is no
    obstacle, a changed or new file of the package is named. The pin is the install
    cell's COMMIT line, and a chapter without one is refused."""
    files = {
        "pyproject.toml": '[project]\nname = "capsnotes"\n',
        "capsnotes/squash.py": "",
        "book/capsbook/display.py": "",
        "README.md": "",
    }
    repo = tmp_path / "repo"
    head = make_repository(repo, files)
    monkeypatch.setattr(refresh_notebooks, "REPO", repo)
    (repo / "README.md").write_text("changed\n")
    assert refresh_notebooks.package_commit() == head
    for changed in ("capsnotes/squash.py", "book/capsbook/new.py", "pyproject.toml"):
        (repo / changed).write_text("changed = True\n")
        named = "commit the package first(.|\n)*" + re.escape(changed)
        with pytest.raises(SystemExit, match=named):
            refresh_notebooks.package_commit()
        if changed in files:
            (repo / changed).write_text(files[changed])
        else:
            (repo / changed).unlink()
    assert refresh_notebooks.package_commit() == head
    source = tmp_path / "02_squash.md"
    source.write_text(SMALL_CHAPTER.replace('COMMIT = ""', 'COMMIT = "0123abc"'))
    refresh_notebooks.pin(source, head)
    assert source.read_text() == SMALL_CHAPTER.replace('COMMIT = ""', f'COMMIT = "{head}"')
    source.write_text(SMALL_CHAPTER.replace('COMMIT = ""\n', ""))
    with pytest.raises(SystemExit, match=re.escape('no install cell with a line COMMIT = "..."')):
        refresh_notebooks.pin(source, head)


def test_a_text_refresh_keeps_the_outputs_and_refuses_changed_code(tmp_path):
    """``--text``: new prose from the source, written as Colab reads it, with the
    committed outputs and execution counts kept; a changed code cell is refused and the
    notebook left as it was."""
    source = tmp_path / "02_squash.md"  # a chapter of the book's table of contents
    source.write_text(SMALL_CHAPTER)
    committed = jupytext.read(source)
    printing = [c for c in committed.cells if c.cell_type == "code"][1]
    printing.execution_count = 2
    printing.outputs = [new_output("stream", name="stdout", text="42\n")]
    nbformat.write(committed, source.with_suffix(".ipynb"))
    source.write_text(SMALL_CHAPTER.replace("says.", "says, in other words."))
    book = chapters()
    refresh_notebooks.refresh_text(source, book, References())
    refreshed = notebook(source)
    prose = [c.source for c in refreshed.cells if c.cell_type == "markdown"]
    assert prose[-1] == f"As [the squash]({colab.HOSTED}/02_squash.html) says, in other words."
    (kept,) = [c for c in refreshed.cells if c.get("outputs")]
    assert kept.outputs[0]["text"] == "42\n" and kept.execution_count == 2
    written = source.with_suffix(".ipynb").read_bytes()
    refresh_notebooks.refresh_text(source, book, References())
    assert source.with_suffix(".ipynb").read_bytes() == written  # cell ids stay put
    source.write_text(SMALL_CHAPTER.replace("6 * 7", "6 * 9"))
    with pytest.raises(SystemExit, match="02_squash.md: code cells changed"):
        refresh_notebooks.refresh_text(source, book, References())
    assert source.with_suffix(".ipynb").read_bytes() == written


def test_a_refresh_runs_the_generic_kernels_and_records_the_versions(tmp_path):
    """A small chapter refreshed: its install cell and its notebook's pin the commit given,
    its kernel ran with ATEN_CPU_CAPABILITY=default (a cell prints it), and the notebook
    records that and the versions it was handed."""
    source = tmp_path / "02_squash.md"  # a chapter of the book's table of contents
    source.write_text(
        SMALL_CHAPTER.replace(
            "print(6 * 7)", 'import os\n\nprint(os.environ.get("ATEN_CPU_CAPABILITY"))'
        )
    )
    versions = {"python": "3.11.7", "torch": "2.11.0"}
    commit = "0123456789abcdef" * 2 + "01234567"
    refresh_notebooks.refresh(source, commit, chapters(), References(), versions)
    assert f'COMMIT = "{commit}"' in source.read_text()
    made = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    assert made.metadata["capsnotes"] == {
        "executed_with": versions,
        "kernels": "ATEN_CPU_CAPABILITY=default",
    }
    pin, printing = [c for c in made.cells if c.cell_type == "code"]
    assert pin.source == f'COMMIT = "{commit}"'
    assert [o.get("text") for o in printing.outputs] == ["default\n"]
    assert all("execution" not in c.metadata for c in made.cells)  # no timestamps kept


#: A chapter with two figures drawn as SVG, the second the one a README shows.
FIGURES_CHAPTER = (
    SMALL_CHAPTER.replace(
        "print(6 * 7)",
        "from IPython.display import SVG\n\n"
        "def square(colour):\n"
        '    return SVG(f\'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4">\'\n'
        '               f\'<rect width="4" height="4" fill="{colour}"/></svg>\')',
    )
    + """
```{code-cell} ipython3
---
mystnb:
  figure:
    name: fig-red
    caption: A red square.
---
square("red")
```

Between the figures.

```{code-cell} ipython3
---
mystnb:
  figure:
    name: fig-blue
    caption: A blue square.
---
square("blue")
```

After the figures.
"""
)


def test_a_refresh_of_the_readme_s_chapter_writes_the_figure_the_readme_shows(
    tmp_path, monkeypatch
):
    """Refreshing the chapter that README_FIGURE names writes the SVG its named figure
    cell shows, as executed, to the README's file; a notebook without that figure is
    refused by name."""
    source = tmp_path / "01_why_capsules.md"  # a chapter of the book's table of contents
    source.write_text(FIGURES_CHAPTER)
    figure = tmp_path / "figure.svg"
    monkeypatch.setattr(refresh_notebooks, "README_FIGURE", (source.stem, "fig-blue", figure))
    versions = {"python": "3.11.7", "torch": "2.11.0"}
    refresh_notebooks.refresh(source, "0" * 40, chapters(), References(), versions)
    made = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    shown = [
        o["data"]["image/svg+xml"]
        for c in made.cells
        for o in c.get("outputs", [])
        if "image/svg+xml" in o.get("data", {})
    ]
    assert len(shown) == 2 and 'fill="blue"' in shown[1] and 'fill="red"' in shown[0]
    assert figure.read_text() == shown[1]
    with pytest.raises(SystemExit, match="no SVG output in the cell of figure fig-green"):
        refresh_notebooks.figure_output(made, "fig-green")
