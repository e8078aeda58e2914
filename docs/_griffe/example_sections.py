"""A griffe extension for the API pages (mkdocs.yml loads it; the docstrings stay as they are).

- The docstrings title their examples "Example:", which Google-style parsing in griffe takes for
  an admonition whose `>>>` lines render as nested block quotes; read as "Examples:" they render
  as Python console code.
- Instance attributes (``self.margin = _check_margin(margin)``) are listed without the
  right-hand side of their assignment, which means nothing to a reader; module constants keep
  their values.
"""

import re

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
        if obj.is_attribute and "instance-attribute" in obj.labels:
            obj.value = None
