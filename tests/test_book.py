"""The book: sources and notebooks in step, notebooks that read the same in Colab and
install the commit that made their outputs, the table of contents, the README's commands,
and (slow) a full `jupyter-book build book` from a fresh copy with warnings as errors."""

from __future__ import annotations

import ast
import functools
import html
import re
import subprocess
import sys

import grimp
import jupytext
import nbformat
import pytest
import tomllib
import yaml

from tests.book_build import build_book, fresh_copy
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
from colab import References, chapters, colab_cells, glued_values, myst_left_in  # noqa: E402

BOOK = REPO / "book"
CONFIG = yaml.safe_load((REPO / "_config.yml").read_text())
TOC = yaml.safe_load((REPO / "_toc.yml").read_text())
#: Chapters that train a model (or show how to on a GPU) and so ask Colab for a GPU.
TRAINING_CHAPTERS = {"08_training", "14_training_on_a_gpu"}
COMMIT = re.compile(r'^COMMIT = "([0-9a-f]{40})"', re.M)


def toc_files() -> list[str]:
    files = [TOC["root"]]
    for part in TOC.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def chapter_sources() -> list:
    return sorted(p for p in BOOK.glob("*.md") if p.read_text().startswith("---\njupytext:"))


def notebook(source):
    return nbformat.read(source.with_suffix(".ipynb"), as_version=4)


def test_every_toc_entry_exists_and_every_chapter_is_listed():
    for name in toc_files():
        assert (BOOK / f"{name}.md").is_file(), name
    listed = set(toc_files())
    for source in chapter_sources():
        assert source.stem in listed, f"{source.name} is not in _toc.yml"


def test_book_toc_is_the_top_level_one():
    # jupyter-book looks for the table of contents in book/; it must be the real one
    assert (BOOK / "_toc.yml").resolve() == (REPO / "_toc.yml").resolve()


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_the_notebook_is_its_source_as_colab_reads_it(source):
    """Same code cells, same metadata; markdown cells as tools/colab.py writes them."""
    paired = source.with_suffix(".ipynb")
    assert paired.is_file(), f"{paired.name} is missing: run python tools/refresh_notebooks.py"
    committed = notebook(source)
    nbformat.validate(committed)
    book = chapters()
    glued = glued_values(committed.cells)
    expected = colab_cells(
        jupytext.read(source).cells, book[source.stem], book, References(), glued
    )

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
    assert committed.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_no_myst_syntax_is_left_in_a_notebook(source):
    """Colab renders Markdown, not MyST: no roles, directives, labels or targets."""
    for cell in notebook(source).cells:
        if cell.cell_type == "markdown":
            assert myst_left_in(cell.source) == [], cell.source[:300]


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_every_figure_has_its_caption_as_text(source):
    cells = notebook(source).cells
    figures = [c for c in cells if c.metadata.get("mystnb", {}).get("figure", {}).get("caption")]
    captions = [c for c in cells if c.cell_type == "markdown" and c.source.startswith("**Fig. ")]
    assert len(figures) == len(captions)
    for index, cell in enumerate(cells):
        if cell in figures:
            following = cells[index + 1]
            assert following.cell_type == "markdown" and following.source.startswith("**Fig. ")


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


def stale_chapters(changed: set[str]) -> list[str]:
    """The chapters whose outputs a change of the files ``changed`` could alter."""
    return [
        source.stem
        for source in chapter_sources()
        if package_files_used(chapter_code(source)) & changed
        or any(f.startswith("capsnotes/training/weights/") for f in changed)
        and "capsnotes/training/weights" in package_files_used(chapter_code(source))
    ]


def test_a_notebook_is_stale_only_when_code_it_runs_changed():
    """The command line is imported by no chapter: changing it re-executes nothing. The
    squash function is run by every chapter that imports the package (its __init__ does).
    A file of the speed wing re-executes only the chapters whose imports reach it."""
    assert stale_chapters({"capsnotes/training/cli.py"}) == []
    assert stale_chapters({"capsnotes/squash.py"}) == [
        s.stem for s in chapter_sources() if package_files_used(chapter_code(s))
    ]
    used = package_files_used("from capsnotes.data import load_dataset")
    assert {"capsnotes/data/__init__.py", "capsnotes/__init__.py", "capsnotes/squash.py"} <= used
    assert "capsnotes/training/cli.py" not in used and "capsnotes/fast/cpu.py" not in used
    assert "book/capsbook/display.py" in package_files_used("import capsbook.display")
    speed = {"capsnotes/fast/cpu.py"}
    for source in chapter_sources():
        reaches = "capsnotes/fast/cpu.py" in package_files_used(chapter_code(source))
        assert (source.stem in stale_chapters(speed)) == reaches
    assert "capsnotes/fast/cpu.py" not in package_files_used("from capsnotes import CapsNet")


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_notebooks_are_executed_and_install_the_commit_of_their_outputs(source):
    """The install cell pins the commit whose package made the outputs: that commit is
    in the history, and nothing the chapter runs of the package has changed since."""
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
    if history.returncode != 0:
        pytest.skip(f"commit {commit[:12]} is not in this clone's history (a shallow clone?)")
    used = sorted(package_files_used(chapter_code(source)))
    changed = ""
    if used:
        changed = subprocess.run(
            ["git", "diff", "--stat", commit, "--", *used],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    pinned = subprocess.run(
        ["git", "show", f"{commit}:pyproject.toml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # What a reader installs is the package and the requirements in its [project] table;
    # pytest settings and the extras do not change a chapter's outputs.
    if project_table(pinned) != project_table((REPO / "pyproject.toml").read_text()):
        changed += "pyproject.toml: the [project] table (name, version, requirements)\n"
    assert not changed, (
        f"code {source.name} runs changed since {commit[:12]}, which made its outputs: "
        f"run python tools/refresh_notebooks.py {source.stem[:2]}\n{changed}"
    )


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_only_the_chapters_that_train_ask_colab_for_a_gpu(source):
    metadata = notebook(source).metadata
    wants_gpu = metadata.get("accelerator") == "GPU"
    assert wants_gpu == (source.stem in TRAINING_CHAPTERS)


def test_colab_links_point_at_notebooks_in_the_repository():
    url = CONFIG["repository"]["url"]
    owner_repo = url.removeprefix("https://github.com/")
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert CONFIG["repository"]["path_to_book"] == "book"
    assert "*.ipynb" in CONFIG["exclude_patterns"]  # so Sphinx reads the .md sources
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", owner_repo), url
    assert CONFIG["repository"]["branch"] == "main"
    for source in chapter_sources():  # the button opens blob/main/book/<chapter>.ipynb
        assert source.with_suffix(".ipynb").is_file(), source.name


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme)
    assert len(commands) >= 2
    build, test = commands[0], commands[1]
    assert build.endswith("jupyter-book build book") and "pip install" in build
    assert "pytest --nbval" in test and "pip install" in test
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == test, ".ci/run must run the README's test command unchanged"


def test_the_build_installs_its_own_requirements_and_no_pytorch():
    """The README's build command, and the Pages workflow, install book/requirements.txt
    and nothing else: neither torch nor the package (whose requirements include torch);
    what the build reads of the package it reads without them (tests/test_explorer.py).
    A project the file shares with the package's requirements or its [book] extra gets
    the same versions."""
    from packaging.requirements import Requirement

    build = re.findall(r"```sh\n(.+?)\n```", (REPO / "README.md").read_text())[0]
    workflow = (REPO / ".github" / "workflows" / "book.yml").read_text()
    for command in (build, workflow):
        installs = [i.strip() for i in re.findall(r"pip install ([^&\n]+)", command)]
        assert installs == ["-r book/requirements.txt"], command
    lines = (BOOK / "requirements.txt").read_text().splitlines()
    wanted = [Requirement(line) for line in lines if line.strip() and line[0] != "#"]
    names = {r.name.lower() for r in wanted}
    assert {"jupyter-book", "numpy", "safetensors"} <= names
    assert not names & {"torch", "torchvision", "capsnotes"}, names
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        r.name.lower(): r.specifier
        for r in map(
            Requirement,
            project["dependencies"] + project["optional-dependencies"]["book"],
        )
    }
    for requirement in wanted:
        if requirement.name.lower() in declared:
            assert requirement.specifier == declared[requirement.name.lower()], requirement


@pytest.mark.slow
def test_the_book_builds_from_a_fresh_copy_without_warnings(built_book):
    """Offline and without MNIST (tests/book_build.py): every chapter page, with its Colab
    button and its committed outputs; math served locally."""
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
        shown = [
            c
            for c in notebook(source).cells
            if not {"remove-output", "remove-cell"} & set(c.metadata.get("tags", []))
        ]
        outputs = [o for c in shown for o in c.get("outputs", [])]
        pictures = sum("image/png" in o.get("data", {}) for o in outputs)
        assert page.count('src="_images/') >= pictures, source.stem
        for output in outputs:
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                first = output["text"].strip().splitlines()[0]
                assert html.escape(first, quote=False) in page, (source.stem, first)
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


def _displayed_code(stem: str) -> str:
    """Everything the chapter's code cells displayed as text or markdown."""
    shown = []
    for cell in notebook(BOOK / f"{stem}.md").cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            shown.append(data.get("text/markdown", "") + data.get("text/plain", ""))
    return "\n".join(shown)


@pytest.mark.parametrize("source", chapter_sources(), ids=lambda p: p.stem)
def test_displayed_code_has_no_docstring_math(source):
    assert ".. math::" not in _displayed_code(source.stem)


def test_glued_numbers_become_text_for_colab():
    """What the HTML pastes from an output, the Colab notebook carries as text."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

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
    from nbformat.v4 import new_markdown_cell

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
    from nbformat.v4 import new_code_cell

    book = chapters()
    title = "#@title Bookkeeping: the numbers the text quotes\nglue('x', 1)"
    cell = new_code_cell(title, metadata={"tags": ["remove-cell"]})
    (colab,) = colab_cells([cell], book["02_squash"], book, References())
    assert colab.metadata["cellView"] == "form"
    untitled = new_code_cell("glue('x', 1)", metadata={"tags": ["remove-cell"]})
    with pytest.raises(ValueError, match="needs a #@title line"):
        colab_cells([untitled], book["02_squash"], book, References())
