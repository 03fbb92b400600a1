"""The type stubs (weir/_weir.pyi) name what the extension module has."""

import ast
from pathlib import Path

import weir
import weir._weir as native

STUBS = Path(weir.__file__).with_name("_weir.pyi")


def stub_classes():
    tree = ast.parse(STUBS.read_text())
    classes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {
                n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")
            }
        elif isinstance(node, ast.FunctionDef):
            classes[node.name] = None
    return classes


def test_every_stubbed_class_and_method_exists_and_every_public_one_is_stubbed():
    stubs = stub_classes()
    public = {name for name in dir(native) if not name.startswith("_")}
    assert public == set(stubs), f"in the module only: {public - set(stubs)}; in the stubs only: {set(stubs) - public}"
    for name, methods in stubs.items():
        if methods is None:
            continue
        actual = {m for m in dir(getattr(native, name)) if not m.startswith("_")}
        assert methods <= actual, f"{name}: stubbed but missing: {methods - actual}"
        assert actual <= methods, f"{name}: not stubbed: {actual - methods}"


def test_the_package_exports_the_module():
    assert set(weir.__all__) == {n for n in dir(native) if not n.startswith("_")}
