"""The docs cannot go stale.

The tour (docs/how_it_works.md) runs: its python blocks, in order, in one namespace. Each block's assertions are
the tour's claims about what the code does.

Every `name` in the prose of the tour and the README resolves (test_every_name_in_the_docs_resolves): a path
exists, a dotted name imports and getattr's, a flag is one of our programs', and an environment variable of ours is
read somewhere. A renamed function, a moved file or a dropped flag fails here, with where the prose names it.

The default training run's figures (its time, its losses) are stated once, in the README, and every other place
that quotes them is checked against that statement (test_the_default_runs_figures_are_stated_once).
"""
import ast
import builtins
import contextlib
import fnmatch
import importlib
import inspect
import io
import keyword
import os
import pathlib
import pkgutil
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "how_it_works.md"
README = ROOT / "README.md"
PACKAGE = ROOT / "tinygrad_gpu"
TRAIN_CHARLM = ROOT / "examples" / "train_charlm.py"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), flags=re.M | re.S)


def test_the_tour_has_its_blocks():
    assert len(BLOCKS) >= 8


def test_the_tour_runs_as_written():
    namespace = {}
    for number, block in enumerate(BLOCKS, 1):
        try:
            exec(compile(block, f"{DOC.name}, block {number}", "exec"), namespace)
        except Exception as e:       # name the block: the tour is read by people, not by pytest
            pytest.fail(f"{DOC.name}, python block {number} failed: {type(e).__name__}: {e}\n{block}")


# ---------------------------------------------------------------------------------------------------------------
# The names in the prose: every `...` span outside the fenced blocks, read by the first rule that fits
# (Names.unresolved):
#   `f(...)`                  a call: its callee, `f`, is checked.
#   several words             a command, an expression, a list of ops, a printed line: only its words that are
#                             flags, our environment variables or paths are checked.
#   `--flag`                  one of our programs takes it: a "--flag" string in examples/, benchmarks/ or
#                             tinygrad_gpu/, or a flag of the training programs (made from TrainConfig's fields).
#   `TINYGRAD_GPU_X`, `TG_X`  our environment variables (with `=value` or without): some code of ours (package,
#                             tests, programs) reads the string. Other programs' variables (OMP_NUM_THREADS) are
#                             not checked.
#   `[extra]`                 an extra of pyproject.toml.
#   `a/b`, `a/`, `x.py`       a path, when it starts at a folder of the repository or of the package, or names a
#                             source file (.py .cu .h .md .sh): it exists, from the root, the package, or as the
#                             end of a path (`nn/gpt.py`); `<op>` in it stands for any name. A run's `out-charlm/`,
#                             `~/.cache/...` and a bare `metrics.jsonl` or `config.json` are not the repository's.
#   `a.b`, `.attr`, `name`    a name. With a dot, it imports and getattr's from `tg`, an alias the docs' own code
#                             imports (`F`), a stand-in variable (VARIABLES), a module of the package with that
#                             last name, or a name a module of the package holds. A name of one part is defined
#                             in the package (`def`/`class name`, `name =`, `obj.name =`, a module or folder), in a
#                             file its section names (a .py file's definitions, a .jsonl file's keys), or spelled
#                             by the package as a string (a metrics key, `"emu"`) or as another library's attribute
#                             (`comm.Allgather`). A plain lowercase word (`cpu`, `step`, `pytest`, `lgamma`) is as
#                             often a device, a program or a field as a name of ours: it only has to be a word of
#                             the project's sources (the package, tests, examples, benchmarks, pyproject.toml).
#   anything else             not a name: literals, keyword arguments, `"mpi"`, `cuda:0`, `{field}`, `...`.
# Never ours: Python's keywords and built-ins (`None`); CUDA's built-ins, which start with `__` and do not end with
# it (`__syncthreads`, `__half`); other libraries' modules and aliases (OTHER_LIBRARIES: `np.memmap`), and the few
# names of someone else's that are written like ours (NOT_OURS).

# The few names of someone else's that are written like ours, each with whose it is.
NOT_OURS = {
    "--hostfile": "Open MPI's mpirun",
    "GPT2LMHeadModel": "transformers'", "GPT2TokenizerFast": "transformers'",
    "cuda_fp16.h": "the CUDA toolkit's", "cuda_bf16.h": "the CUDA toolkit's",
}
# Other libraries, by the module names and aliases the docs write them with.
OTHER_LIBRARIES = {"np", "numpy", "torch", "cupy", "transformers", "numba", "mpi4py"}
# The docs' stand-in variables, by the classes they may stand for: `x.to(device)`, `model.generate`, `ctx.apply`.
VARIABLES = {"x": ["Tensor"], "model": ["GPT"], "ctx": ["Function", "FunctionCtx"]}
SOURCE_SUFFIXES = (".py", ".cu", ".h", ".md", ".sh")
OUR_VARIABLE = re.compile(r"\$?((?:TINYGRAD_GPU|TG)_[A-Z0-9_]+)(=\S*)?")
IDENTIFIER = r"[A-Za-z_]\w*"
DEFINITION = re.compile(rf"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+({IDENTIFIER})"
                        rf"|^[ \t]*(?:{IDENTIFIER}\.)?({IDENTIFIER})[ \t]*(?::[^=\n]*)?=(?!=)", flags=re.M)


def prose(path: pathlib.Path) -> str:
    """The file without its fenced blocks, each left as its line breaks (so that lines keep their numbers)."""
    return re.sub(r"^```.*?^```[ \t]*$", lambda m: "\n" * m.group(0).count("\n"), path.read_text(),
                  flags=re.M | re.S)


def prose_spans(path: pathlib.Path) -> list:
    """(span, line, section) for every `...` span outside the fenced blocks, its white space made single spaces
    (a span may run over a line break)."""
    text = prose(path)
    headings = [(m.start(), m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, flags=re.M)]
    return [(" ".join(m.group(1).split()), text.count("\n", 0, m.start()) + 1,
             next((title for start, title in reversed(headings) if start <= m.start()), ""))
            for m in re.finditer(r"`([^`]+)`", text)]


def _read(paths) -> str:
    return "\n".join(path.read_text(errors="replace") for path in paths)


def _definitions(text: str) -> set:
    return {a or b for a, b in DEFINITION.findall(text)}


class Names:
    """What the repository holds: its files, the package's modules and definitions, our programs' flags, the
    environment variables our code reads, pyproject's extras."""

    def __init__(self):
        self.files = []                 # the repository's files and folders, from its root
        for folder, subfolders, files in os.walk(ROOT):
            subfolders[:] = [d for d in subfolders if not d.startswith((".", "__")) and not d.endswith(".egg-info")]
            here = pathlib.Path(folder).relative_to(ROOT)
            self.files += [(here / name).as_posix() for name in subfolders + files]
        self.folders = {p.name for base in (ROOT, PACKAGE) for p in base.iterdir()
                        if p.is_dir() and not p.name.startswith((".", "__"))}
        self.modules = [importlib.import_module("tinygrad_gpu")] + [
            importlib.import_module(info.name) for info in pkgutil.walk_packages([str(PACKAGE)], "tinygrad_gpu.")]
        package = _read(p for p in sorted(PACKAGE.rglob("*")) if p.suffix in (".py", ".cu", ".h"))
        self.defined = (_definitions(package) | {m.__name__.rsplit(".", 1)[-1] for m in self.modules}
                        | {name for m in self.modules for name in vars(m)}
                        | {name for m in self.modules for value in vars(m).values()
                           if inspect.isclass(value) and value.__module__.startswith("tinygrad_gpu")
                           for name in list(vars(value)) + list(getattr(value, "__slots__", ()))})
        self.spelled = {a or b for a, b in re.findall(r"""["'](\w+)["']|\.(\w+)""", package)}  # "emu", comm.Allgather
        sources = [p for folder in ("tinygrad_gpu", "tests", "examples", "benchmarks")
                   for p in (ROOT / folder).rglob("*")
                   if p.suffix in (".py", ".cu", ".h", ".sh") and p.name != "test_docs.py"]   # not these lists
        sources.append(ROOT / "pyproject.toml")
        self.words = set(re.findall(r"\w+", _read(sources)))
        self.variables = set(re.findall(r"""["']([A-Z][A-Z0-9_]+)["']""", _read(sources)))
        self.aliases = {"tg": "tinygrad_gpu", "tinygrad_gpu": "tinygrad_gpu"}
        for path in (README, DOC):   # `import tinygrad_gpu.nn.functional as F` in the docs' own code
            self.aliases.update((alias, module) for module, alias in re.findall(
                r"^import (tinygrad_gpu[\w.]*) as (\w+)$", path.read_text(), flags=re.M))
        extras = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(^\[|\Z)", (ROOT / "pyproject.toml").read_text(),
                           flags=re.M | re.S)
        self.extras = set(re.findall(r"^(\w+) = \[", extras.group(1), flags=re.M)) if extras else set()
        programs = [p for folder in ("examples", "benchmarks", "tinygrad_gpu") for p in (ROOT / folder).rglob("*.py")]
        self.flags = set(re.findall(r"""["'](--[a-z][\w-]*)["']""", _read(programs)))
        from tinygrad_gpu.train import parse_args      # the training programs' flags, made from TrainConfig
        with contextlib.redirect_stdout(io.StringIO()) as help_text, pytest.raises(SystemExit):
            parse_args(["--help"])
        self.flags |= set(re.findall(r"(?<![\w-])--[a-z][\w-]*", help_text.getvalue()))

    def unresolved(self, span: str, section_files: list):
        """Why `span` does not resolve, or None: it resolves, or it is not a name of ours."""
        call = re.fullmatch(r"([\w.]+)\(.*\)", span)
        span = call.group(1) if call else span
        if span in NOT_OURS:
            return None
        if " " in span:
            checked = [w for w in span.split(" ") if w.startswith("--") or OUR_VARIABLE.fullmatch(w) or "/" in w]
            return "; ".join(filter(None, (self.unresolved(word, section_files) for word in checked))) or None
        if span.startswith("--"):
            flag = span.split("=")[0]
            return None if flag in self.flags or flag in NOT_OURS else f"no program of ours takes {flag}"
        variable = OUR_VARIABLE.fullmatch(span)
        if variable:
            name = variable.group(1)
            return None if name in self.variables else f"nothing reads the environment variable {name}"
        extra = re.fullmatch(r"\[(\w+)\]", span)
        if extra:
            return None if extra.group(1) in self.extras else f"pyproject.toml has no extra {extra.group(1)}"
        if re.fullmatch(r"[\w.<>-]+(/[\w.<>-]*)+", span) or re.fullmatch(r"[\w-]+(\.[\w-]+)*\.(py|cu|h|md|sh)", span):
            return self._path(span)
        if re.fullmatch(rf"\.?{IDENTIFIER}(\.{IDENTIFIER})*(\.\*)?|\w*\*\w*", span) and not re.fullmatch(
                r"[\w-]+\.(jsonl?|txt|bin|safetensors|png|svg|dot|csv)", span):
            return self._name(span.lstrip("."), section_files)
        return None

    def _path(self, path: str):
        if path.split("/")[0] not in self.folders and not path.endswith(SOURCE_SUFFIXES):
            return None           # not the repository's: a run's folder, ~/.cache/..., OUT_DIR/huggingface
        pattern = re.sub(r"<\w+>", "*", path.rstrip("/"))      # kernels/<op>.py: some kernels/*.py
        found = any(fnmatch.fnmatchcase(f, pattern) or fnmatch.fnmatchcase(f, "tinygrad_gpu/" + pattern)
                    or fnmatch.fnmatchcase(f, "*/" + pattern) for f in self.files)
        return None if found else f"no file or folder {path}"

    def _name(self, name: str, section_files: list):
        head, *rest = name.split(".")
        if head in OTHER_LIBRARIES or head in NOT_OURS:
            return None
        if rest:
            if any(self._has(start, rest) for start in self._objects(head)):
                return None
            return f"{name} does not resolve"
        if keyword.iskeyword(head) or hasattr(builtins, head) or re.fullmatch(r"__\w*[^_]", head):
            return None           # Python's own names; CUDA's built-ins (`__syncthreads`, `__half`)
        if "*" in head:           # a pattern: `reference_*`, `*_like`
            pattern = re.compile(head.replace("*", r"\w+"))
            return None if any(pattern.fullmatch(n) for n in self.defined) else f"nothing is named like {head}"
        if head in self.defined or head in self.spelled or head in self._defined_in(section_files):
            return None
        if re.fullmatch(r"[a-z][a-z0-9]*", head):     # a plain word: a device, a program, a field, English
            return None if head in self.words else f"no source of the project has the word {head}"
        return f"nothing in the package defines {head}"

    def _objects(self, head: str) -> list:
        """What `head` may stand for: an alias, a stand-in variable's class, a module of that name, a name a module
        of the package holds."""
        objects = [importlib.import_module(self.aliases[head])] if head in self.aliases else []
        for name in VARIABLES.get(head, []):
            objects += self._objects(name)
        objects += [m for m in self.modules if m.__name__.rsplit(".", 1)[-1] == head]
        return objects + [vars(m)[head] for m in self.modules if head in vars(m)]

    @staticmethod
    def _has(value, attributes: list) -> bool:
        for i, attribute in enumerate(attributes):
            if attribute == "*" or (attribute in getattr(value, "__slots__", ()) and i == len(attributes) - 1):
                return True
            if hasattr(value, attribute):
                value = getattr(value, attribute)
                continue
            if inspect.isclass(value) and i == len(attributes) - 1:    # set on an instance: self.name = ...
                with contextlib.suppress(OSError, TypeError):
                    source = "".join(inspect.getsource(c) for c in value.__mro__ if c.__module__.startswith("tinygrad"))
                    return re.search(rf"\b(self|ctx)\.{attribute}\s*(:[^=\n]*)?=", source) is not None
            return False
        return True

    def _defined_in(self, section_files: list) -> set:
        """The definitions of the .py files and the keys of the .jsonl/.json files that a section names."""
        paths = [ROOT / f for f in self.files if any(f == name or f.endswith("/" + name) for name in section_files)]
        return (_definitions(_read(p for p in paths if p.suffix == ".py"))
                | set(re.findall(r'"(\w+)"\s*:', _read(p for p in paths if p.suffix in (".json", ".jsonl")))))


@pytest.fixture(scope="module")
def names():
    return Names()


@pytest.mark.parametrize("path", [README, DOC], ids=lambda path: path.name)
def test_every_name_in_the_docs_resolves(names, path):
    spans = prose_spans(path)
    files_by_section = {}
    for span, _, section in spans:
        if re.fullmatch(r"[\w/.-]+\.(py|jsonl?)", span):
            files_by_section.setdefault(section, []).append(span)
    problems = [f"{path.name}:{line} (section {section!r}): `{span}`: {why}" for span, line, section in spans
                for why in [names.unresolved(span, files_by_section.get(section, []))] if why]
    assert not problems, f"{len(problems)} names in {path.name} do not resolve:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# The default run, `python examples/train_charlm.py`: its figures (its time with numba and without, its final
# losses) are stated in one sentence of the README, under "Training language models" (THE_DEFAULT_RUN).
# examples/train_charlm.py's docstring repeats them, checked against it; any other sentence of the README about the
# default run gives no time or loss of its own (it refers to that sentence), so the run is timed one way.
# ("The default run under mpiexec ..." is another run, with its own figures.)
FIGURE = r"\d+(?:\.\d+)?"
THE_DEFAULT_RUN = re.compile(rf"The default run ends at train loss (?P<train>{FIGURE}), val loss (?P<val>{FIGURE}), "
                             rf"in (?P<numba>\d+ to \d+ s) on [^.]*? with the `compiled` extra "
                             rf"and in (?P<numpy>\d+ to \d+ s) without it")
DOCSTRING_FIGURES = re.compile(rf"take (?P<numba>\d+ to \d+ s) on a 2-core CPU with numba, (?P<numpy>\d+ to \d+ s) "
                               rf"without, and end at train loss (?P<train>{FIGURE}), val loss (?P<val>{FIGURE})")
TIME_OR_LOSS = re.compile(rf"\b{FIGURE}(?: to {FIGURE})? ?(?:s|min|minutes?|seconds?|h|hours?)\b|\bloss(?:es)? "
                          rf"(?:of )?{FIGURE}|\b(?:a few|one to two|several) (?:minutes|seconds)\b")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _readme_prose() -> str:
    return _flat(prose(README))


def test_the_default_runs_figures_are_stated_once():
    stated = THE_DEFAULT_RUN.findall(_readme_prose())
    assert len(stated) == 1, f"README.md states the default run's figures in {len(stated)} sentences, not one"
    figures = THE_DEFAULT_RUN.search(_readme_prose()).groupdict()

    docstring = _flat(ast.get_docstring(ast.parse(TRAIN_CHARLM.read_text())))
    quoted = DOCSTRING_FIGURES.search(docstring)
    assert quoted, f"{TRAIN_CHARLM.name}'s docstring no longer quotes the default run's figures: {docstring}"
    assert quoted.groupdict() == figures, (f"{TRAIN_CHARLM.name}'s docstring quotes {quoted.groupdict()}, "
                                           f"README.md states {figures}")
    others = TIME_OR_LOSS.findall(docstring.replace(quoted.group(0), ""))
    assert not others, f"{TRAIN_CHARLM.name}'s docstring times the default run another way too: {others}"

    sentences = re.split(r"(?<=[.;:!?])\s+(?=[A-Z`(\"])", _readme_prose())
    elsewhere = [s for s in sentences if re.search(r"\bdefault run\b(?! under)", s, flags=re.I)
                 and not THE_DEFAULT_RUN.search(s) and TIME_OR_LOSS.search(s)]
    assert not elsewhere, ("README.md gives the default run's time or losses outside the sentence that states "
                           "them (refer to it instead):\n" + "\n".join(elsewhere))
