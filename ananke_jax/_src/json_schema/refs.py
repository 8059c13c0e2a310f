"""``$ref`` resolution inside one schema document: JSON pointers, ``$id`` and ``$anchor``.

Every subschema is known by its JSON pointer from the document root; a reference resolves to the
pointer of its target. Remote documents are not fetched: a reference outside the document is a
`SchemaError`.
"""

from __future__ import annotations

import urllib.parse

from ananke_jax._src.errors import SchemaError

_ROOT_BASE = "https://root.invalid/schema.json"  # a base that urljoin resolves against


def child(pointer: str, *keys) -> str:
    """The pointer of ``pointer``'s member ``keys`` (escaped per RFC 6901)."""
    for k in keys:
        pointer += "/" + str(k).replace("~", "~0").replace("/", "~1")
    return pointer


class Resolver:
    """Finds subschemas by pointer and resolves references against ``$id`` base URIs."""

    def __init__(self, root):
        self.root = root
        self._by_uri: dict[str, str] = {}  # absolute URI (with #anchor) -> pointer
        self._base: dict[str, str] = {}  # pointer -> base URI of the schema there
        self._index(root, "#", _ROOT_BASE)

    def _index(self, schema, pointer: str, base: str) -> None:
        if isinstance(schema, dict):
            anchors = [schema.get("$anchor")]
            id_ = schema.get("$id")
            if isinstance(id_, str) and id_.startswith("#"):  # a fragment alone is no new document
                anchors.append(id_[1:] if id_[1:2] not in ("", "/") else None)  # draft 7's "#name" is an anchor
            elif isinstance(id_, str):
                base = urllib.parse.urljoin(base, id_)
                self._by_uri[base.split("#")[0]] = pointer
            for anchor in anchors:
                if isinstance(anchor, str):
                    self._by_uri[base.split("#")[0] + "#" + anchor] = pointer
            self._base[pointer] = base
            for key, value in schema.items():
                if key not in ("enum", "const", "examples", "default"):
                    self._index(value, child(pointer, key), base)
        elif isinstance(schema, list):
            for i, value in enumerate(schema):
                self._index(value, child(pointer, i), base)

    def get(self, pointer: str):
        """The subschema at ``pointer`` (``#/a/b``)."""
        node = self.root
        for raw in pointer[1:].split("/")[1:] if pointer != "#" else []:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            elif isinstance(node, dict) and key in node:
                node = node[key]
            else:
                raise KeyError(pointer)
        return node

    def resolve(self, ref: str, at: str) -> str:
        """The pointer that ``ref``, written in the schema at pointer ``at``, refers to."""
        base = self._base.get(at, _ROOT_BASE)
        # urljoin does not resolve against URNs; a fragment alone always stays in the document.
        target = base.split("#")[0] + ref if ref.startswith("#") else urllib.parse.urljoin(base, ref)
        document, _, fragment = target.partition("#")
        if target in self._by_uri:
            return self._by_uri[target]
        if document in self._by_uri or document == _ROOT_BASE:
            start = self._by_uri.get(document, "#")
            pointer = start + (urllib.parse.unquote(fragment) if fragment.startswith("/") else "")
            if not fragment or fragment.startswith("/"):
                try:
                    self.get(pointer)
                    return pointer
                except KeyError:
                    pass
        raise SchemaError(f"unresolvable $ref {ref!r} (only references inside the document are supported)", keyword="$ref", pointer=at)
