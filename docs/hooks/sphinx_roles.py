"""A griffe extension for the API reference: the docstrings' Sphinx cross-reference roles
(``:class:`~evireform.index.PropositionIndex```, ``:func:`make_engine```, ...) rendered as
code spans with the short name (``PropositionIndex``), instead of the raw role text."""
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|doc|ref):"
                  r"`(~?)([^`<>]+?)(?:\s*<([^`>]+)>)?`")


def _short(match: re.Match) -> str:
    tilde, text, target = match.group(1), match.group(2).strip(), match.group(3)
    if target:  # :class:`label <target>`
        return f"`{text}`"
    name = text.rsplit(".", 1)[-1] if tilde else text
    return f"`{name}`"


def convert(text: str) -> str:
    return ROLE.sub(_short, text)


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        for o in [obj, *getattr(obj, "members", {}).values()]:
            if getattr(o, "is_alias", False):  # the target's own docstring is converted
                continue
            doc = o.docstring
            if doc is not None:
                doc.value = convert(doc.value)

    def on_package(self, *, pkg, **kwargs) -> None:
        """The whole package once loaded, its own docstring included: a package whose
        module docstring ``on_object`` never sees (``kernels``, shipped as
        ``evireform.kernels``) is converted too."""
        seen = set()
        todo = [pkg]
        while todo:
            o = todo.pop()
            if id(o) in seen or getattr(o, "is_alias", False):
                continue
            seen.add(id(o))
            doc = o.docstring
            if doc is not None:
                doc.value = convert(doc.value)
            todo.extend(getattr(o, "members", {}).values())
