"""The package's layers, read from every module's imports (``ast``): arrows point one way only.

contract <- spark <- formats <- replay <- jobs; contract <- landing <- triggers <- sensors;
contract <- hooks <- operators. Inside ``formats``, a decoder's family (one subpackage) imports only its
own modules and the shared ``formats.base``, ``formats.events`` and ``formats.common``; no family
imports another, and no module imports a registered decoder's module. Imports inside ``if TYPE_CHECKING:`` are not imports at run time
and are not counted; a module's imports inside its functions are. The Spark-free layers are checked
transitively: ``contract`` and ``landing`` must not load PySpark, either themselves or through the
modules their imports load (a package's ``__init__`` runs when any of its modules is imported, so
it counts too; another module's function-level imports run only when called, so they do not).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = "airflow_cdc_provider"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# layer -> the project layers its modules may import (its own included).
ALLOWED = {
    "contract": {"contract"},
    "spark": {"contract", "spark"},
    "formats": {"contract", "spark", "formats"},
    "replay": {"contract", "spark", "formats", "replay"},
    # The class archive's builder replays the bundled sample (a leaf: paths and arguments only).
    "jobs": {"contract", "spark", "formats", "replay", "jobs", "sample_data"},
    # The sensor reads landed records without Spark; it may use a format's Spark-free pieces
    # (the DTS Avro record schema), which the transitive check below keeps free of PySpark.
    "landing": {"contract", "landing", "formats"},
    # The Spark Connect hook runs the job in the task's own process (jobs.connect_run).
    "hooks": {"contract", "hooks", "jobs"},
    "operators": {"contract", "hooks", "operators"},
    "triggers": {"contract", "landing", "triggers"},
    "sensors": {"contract", "landing", "triggers", "sensors"},
    "sample_data": set(),
    "get_provider_info": set(),
    "__init__": set(),
}
# Third-party packages a layer must not reach, directly or through project imports.
FORBIDDEN = {
    "contract": {"pyspark", "py4j", "airflow"},
    "spark": {"airflow"},
    "formats": {"airflow"},
    "replay": {"airflow"},
    "jobs": {"airflow"},
    "landing": {"pyspark", "py4j"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, top_level: bool = False) -> set[str]:
    """Absolute names of everything ``module`` imports at run time (``top_level``: on import only)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _project_modules(names: set[str]) -> set[str]:
    """The project modules (and their parent packages) that importing ``names`` runs."""
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(2, len(parts) + 1):
            candidate = ".".join(parts[:i])
            if candidate in MODULES:
                found.add(candidate)
    return found


@cache
def _direct(module: str, top_level: bool = False) -> tuple[frozenset[str], frozenset[str]]:
    """``(project modules, third-party top-level packages)`` that ``module`` imports itself."""
    names = _imported_names(module, top_level)
    external = {n.split(".")[0] for n in names if not n.startswith(PACKAGE)}
    return frozenset(_project_modules(names) - {module}), frozenset(external)


def _reached(module: str) -> set[str]:
    """Third-party packages ``module`` reaches through any chain of project imports."""
    seen, todo, external = set(), [module], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        parents = [".".join(current.split(".")[:i]) for i in range(2, len(current.split(".")))]
        project, outside = _direct(current, top_level=current != module)
        external |= outside
        todo.extend(project | {p for p in parents if p in MODULES})
    return external


def test_every_layer_is_known():
    assert {_layer(m) for m in MODULES} <= set(ALLOWED)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    layer = _layer(module)
    project, _ = _direct(module)
    wrong = sorted(m for m in project if _layer(m) not in ALLOWED[layer])
    assert wrong == [], (
        f"{module} ({layer}) imports {wrong}; {layer} may import only {sorted(ALLOWED[layer])}"
    )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) in FORBIDDEN))
def test_layers_stay_free_of_what_they_must_not_load(module):
    reached = _reached(module) & FORBIDDEN[_layer(module)]
    assert reached == set(), f"{module} loads {sorted(reached)} (directly or through project imports)"


def test_the_checker_sees_relative_imports_and_skips_type_checking_blocks(tmp_path, monkeypatch):
    """The rule itself: a relative import counts, an import only for type checkers does not."""
    package = tmp_path / PACKAGE / "contract"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    probe = package / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..replay import engine\n"
        "if TYPE_CHECKING:\n    import pyspark\n"
        "def later():\n    import airflow\n"
    )
    monkeypatch.setitem(MODULES, f"{PACKAGE}.contract.probe", probe)
    names = _imported_names(f"{PACKAGE}.contract.probe")
    assert f"{PACKAGE}.replay.engine" in names and "airflow" in names and "pyspark" not in names


# Modules of ``formats`` that every family may import; every other module belongs to one family.
FORMATS_SHARED = ("formats", "formats.base", "formats.events", "formats.common")


def _family(module: str) -> str | None:
    """``formats.debezium.json`` -> ``debezium``; None for the shared modules."""
    rest = module.removeprefix(f"{PACKAGE}.")
    if any(rest == s or rest.startswith(f"{s}.") for s in FORMATS_SHARED[1:]) or rest == "formats":
        return None
    return rest.split(".")[1]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) == "formats"))
def test_decoder_families_import_only_their_own_and_the_shared_modules(module):
    from airflow_cdc_provider.formats import _REGISTRY

    decoders = {target.split(":")[0] for target in _REGISTRY.values()}
    project, _ = _direct(module)
    formats = {m for m in project if _layer(m) == "formats" and m != f"{PACKAGE}.formats"}
    family = _family(module)
    foreign = sorted(m for m in formats if _family(m) not in (None, family))
    decoder_imports = sorted(m for m in formats if m in decoders)
    assert foreign == [], f"{module} (family {family}) imports other families' modules {foreign}"
    assert decoder_imports == [], (
        f"{module} imports decoder modules {decoder_imports}; share through the family"
    )
    if family is None:
        assert all(_family(m) is None for m in formats), (
            f"shared {module} imports a family: {sorted(formats)}"
        )


# The house's sizes: a function a reader can hold at once, replay stages small enough to read whole.
MAX_FUNCTION_LINES = 60
MAX_REPLAY_MODULE_LINES = 400


def test_no_function_runs_over_the_house_limit():
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines; split them into named steps: {long}"


def test_no_replay_module_runs_over_the_house_limit():
    long = {
        module: lines
        for module, path in MODULES.items()
        if _layer(module) == "replay"
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_REPLAY_MODULE_LINES
    }
    assert long == {}, f"replay modules over {MAX_REPLAY_MODULE_LINES} lines; one stage per module: {long}"
