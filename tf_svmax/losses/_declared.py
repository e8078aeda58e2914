"""The losses' declared capabilities, read from their source without importing them.

A loss declares its capabilities once, as class attributes (`tf_svmax.losses.Loss`:
``accepts_reference_rows``, ``class_block_rows``, ...). The library reads them on the classes;
a program that must know them before Keras is imported (the retrieval trainer checks its flags
against them: ``--xbm_size`` needs a loss that accepts reference rows, ``--batch_k`` a loss's
``class_block_rows``) reads them here, from the modules of this folder parsed with `ast`, as
Python looks them up: the value the class body assigns, else its base's, up to `Loss`'
default. This module imports only the standard library and no module of the package, so that
`trainers.harness.lazy` loads it by itself, as it loads `tf_svmax._args`.

A declaration must therefore be a literal assigned in the class body (``class_block_rows =
4``, not ``= 2 * K``), on a class with one base: anything else is refused naming the class,
the attribute and the line. tests/losses/test_declared_backends.py checks every registered
class against Python's own attribute lookup.
"""

import ast
import functools
import os


class Declarations:
    """The classes of the Python modules in `folder`, the package `package` (e.g.
    ``"tf_svmax.losses"``: a base imported from one of its modules is followed there), read
    from their source."""

    def __init__(self, folder, package):
        self.folder, self.package = folder, package

    def declared(self, class_name, attribute):
        """The literal value that `attribute` has on the class `class_name` (defined at the top
        level of one module of the folder): the last assignment of its class body, else its
        base's, and so on. A ValueError names the class and the attribute when the class is
        not found or found twice, when the value is no literal or is assigned otherwise (in a
        branch, by unpacking, outside the class), when a class on the way has several bases,
        and when no class up to a base outside the folder declares it."""
        module, node = self._class(class_name)
        while True:
            path = os.path.join(self.folder, f"{module}.py")
            _refuse_patches(self._tree(module), node.name, attribute, path)
            found, value = _assigned(node, attribute, path)
            if found:
                return value
            if len(node.bases) != 1:
                names = ", ".join(ast.unparse(base) for base in node.bases)
                raise ValueError(
                    f"{node.name} has {len(node.bases)} bases ({names}) in {path}; the "
                    f"declared {attribute} of {class_name} is read along one base, as the "
                    "library's losses have."
                )
            base = self._base(module, node.bases[0])
            if base is None:
                raise ValueError(
                    f"{class_name} declares no {attribute}, nor do its bases in "
                    f"{self.package} up to {ast.unparse(node.bases[0])}."
                )
            module, node = base

    # One read and at most one parse per module for the process (the reader of the library's
    # folder lives as long).
    @functools.cache  # noqa: B019
    def _source(self, module):
        with open(os.path.join(self.folder, f"{module}.py"), encoding="utf-8") as file:
            return file.read()

    @functools.cache  # noqa: B019 (as `_source`)
    def _tree(self, module):
        return ast.parse(self._source(module), os.path.join(self.folder, f"{module}.py"))

    def _module(self, name):
        """Whether `name` is a module of the folder."""
        return os.path.isfile(os.path.join(self.folder, f"{name}.py"))

    @functools.cache  # noqa: B019 (as `_tree`: each class is looked for once)
    def _class(self, class_name):
        """``(module, ClassDef)`` of the class `class_name` of the folder's modules."""
        found = []
        for file in sorted(os.listdir(self.folder)):
            module, extension = os.path.splitext(file)
            if extension != ".py":
                continue
            # Only the modules whose text names the class are parsed (a few of the folder's).
            if f"class {class_name}" not in self._source(module):
                continue
            node = _top_class(self._tree(module), class_name)
            if node is not None:
                found.append((module, node))
        if not found:
            raise ValueError(
                f"Invalid value for argument `class_name`. Expected the name of a class of "
                f"{self.package}. Received: class_name={class_name!r}"
            )
        if len(found) > 1:
            files = ", ".join(f"{module}.py" for module, _ in found)
            raise ValueError(
                f"{class_name} is defined in {len(found)} modules ({files}) of {self.package}; "
                "expected one."
            )
        return found[0]

    def _base(self, module, base):
        """``(module, ClassDef)`` of the class that `base` (a base of a class of `module`:
        ``Name`` or ``module.Name``) is, or None for one outside the folder
        (``keras.losses.Loss``)."""
        tree = self._tree(module)
        imported = _imports(tree, self.package)
        if isinstance(base, ast.Name):
            node = _top_class(tree, base.id)
            if node is not None:
                return module, node
            where = imported.get(base.id)
            if where is not None and where[0] is None and not self._module(where[1]):
                # ``from package import Name``: a class the package re-exports.
                return self._class(where[1])
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            where = imported.get(base.value.id)
            # ``from package import module``: ``module.Name``.
            where = (where[1], base.attr) if where and where[0] is None else None
        else:
            return None
        if where is None or where[0] is None or not self._module(where[0]):
            return None
        other, name = where
        node = _top_class(self._tree(other), name)
        return None if node is None else (other, node)


def _top_class(tree, name):
    """The class `name` defined at the top level of the module `tree` (the last), or None."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return classes[-1] if classes else None


def _imports(tree, package):
    """The names that the module `tree` imports from `package`: ``{name: (module, its name
    there)}`` for ``from package.module import name``, ``{name: (None, module)}`` for ``from
    package import module`` (and their relative spellings)."""
    bound = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level > 1:
            continue
        source = node.module or ""
        if node.level == 1:
            source = f"{package}.{source}" if source else package
        for alias in node.names:
            name = alias.asname or alias.name
            if source == package:
                bound[name] = (None, alias.name)
            elif source.startswith(f"{package}.") and "." not in source[len(package) + 1 :]:
                bound[name] = (source[len(package) + 1 :], alias.name)
    return bound


def _binds(node, attribute):
    """Whether the syntax tree `node` binds the name `attribute` in the scope it is in (a
    function's or a class' body is a scope of its own: only its name counts)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == attribute
    if isinstance(node, ast.Lambda):
        return False
    if isinstance(node, ast.Name):
        return node.id == attribute and isinstance(node.ctx, ast.Store)
    if isinstance(node, ast.alias):
        return (node.asname or node.name) == attribute
    return any(_binds(child, attribute) for child in ast.iter_child_nodes(node))


def _assigned(node, attribute, path):
    """``(found, value)``: whether the body of the class `node` assigns `attribute`, and the
    literal it assigns last."""
    found, value = False, None
    for statement in node.body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = [statement.target]
        else:
            if _binds(statement, attribute):
                raise ValueError(
                    f"{node.name}.{attribute} is assigned otherwise than by `{attribute} = "
                    f"<a literal>` in its class body ({path} line {statement.lineno}); the "
                    "declared capabilities are read from the source without importing Keras "
                    "(tf_svmax.losses._declared)."
                )
            continue
        if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
            try:
                found, value = True, ast.literal_eval(statement.value)
            except (ValueError, TypeError):
                raise ValueError(
                    f"{node.name}.{attribute} is not a literal in {path} line "
                    f"{statement.lineno}: `{ast.unparse(statement.value)}`; the declared "
                    "capabilities are read from the source without importing Keras "
                    "(tf_svmax.losses._declared): write the value itself."
                ) from None
        elif any(_binds(t, attribute) for t in targets):
            raise ValueError(
                f"{node.name}.{attribute} is assigned by unpacking in {path} line "
                f"{statement.lineno}; expected `{attribute} = <a literal>`."
            )
    return found, value


def _refuse_patches(tree, class_name, attribute, path):
    """Refuses ``ClassName.attribute = ...`` at the top level of the module `tree`: the class
    body's value (or its base's) would not be the class' own."""
    for statement in tree.body:
        targets = getattr(statement, "targets", [getattr(statement, "target", None)])
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == attribute
                and isinstance(target.value, ast.Name)
                and target.value.id == class_name
            ):
                raise ValueError(
                    f"{class_name}.{attribute} is assigned outside its class body ({path} line "
                    f"{statement.lineno}); declare it in the class body as a literal."
                )


# The library's losses: this folder.
LOSSES = Declarations(os.path.dirname(os.path.abspath(__file__)), "tf_svmax.losses")
declared = LOSSES.declared
