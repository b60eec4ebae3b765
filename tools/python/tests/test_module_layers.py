"""The kit's modules import each other in one direction (docs/target-protocol.md, "The Python kit's modules"):
every import between them, module-level or inside a function, goes from a higher layer to a lower one, so
there is no circle, and the public names of replayssm_kit.target stay importable."""

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "replayssm_kit"

# Layer of each module: a module may import modules of lower layers only.
LAYERS = {
    "safetensors_io": 0, "compare": 0,
    "protocol": 1, "convert": 1, "tiers": 1,
    "rows": 2, "fixture": 2, "interface": 2,
    "session": 3, "trace": 3, "mrope": 3,
    "server": 4,
    "engine": 5, "replay": 5, "mrope_replay": 6,
    "target": 6, "pytest_helper": 6,
    "pytest_plugin": 7,
    "__init__": 8, "__main__": 9,
}


def kit_imports(path: Path):
    """(line, imported kit module) for every relative import of the file, wherever it sits."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                yield node.lineno, node.module.split(".")[0]
            else:  # from . import x
                for alias in node.names:
                    yield node.lineno, alias.name


def test_every_module_has_a_layer():
    assert sorted(p.stem for p in KIT.glob("*.py")) == sorted(LAYERS)


def test_imports_go_down_only():
    wrong = []
    for path in sorted(KIT.glob("*.py")):
        me = LAYERS[path.stem]
        for line, other in kit_imports(path):
            if other in LAYERS and LAYERS[other] >= me:
                wrong.append(f"{path.name}:{line} imports {other} (layer {LAYERS[other]} >= {me})")
    assert not wrong, "\n".join(wrong)


def test_public_names_of_target_stay():
    from replayssm_kit.target import (CONV_FIXTURE_OPS, FIXTURE_OPS, INDEX_FIELDS, PAD_SLOT, Row,  # noqa: F401
                                      RowIndex, Rows, Target, TargetError, is_device_fault, serve)
    from replayssm_kit import serve as package_serve
    assert package_serve is serve
