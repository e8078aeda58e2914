"""A griffe extension for the API pages (mkdocs.yml loads it): `tf_svmax.losses`' exports.

The package's ``__all__`` is made at import from its registry (`tf_svmax.losses._registry`),
which static analysis cannot evaluate. Statically the same names are the ones its
``__init__.py`` imports from its modules (every registered object is imported there:
tests/losses/test_registry_backends.py checks that the registry, ``__all__`` and these imports
agree) and `get`.
"""

import griffe

PACKAGE = "tf_svmax.losses"


class RegistryExports(griffe.Extension):
    def on_module_members(self, *, mod, **kwargs):
        if mod.path != PACKAGE:
            return
        imported = [
            name
            for name, member in mod.members.items()
            if member.is_alias
            and not name.startswith("_")
            and member.target_path.startswith(f"{PACKAGE}.")
        ]
        mod.exports = sorted({"get", *imported})
