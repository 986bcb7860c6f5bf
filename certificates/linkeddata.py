"""JSON-LD for the ``eddsa-rdfc-2022`` proof: the bundled contexts, a document
loader that serves only them, and RDF Dataset Canonicalization (RDFC-1.0).

The contexts a credential names are files in ``certificates/contexts`` (their
sources and digests are in the README there), never fetched: a context fetched
at run time could change what a signed document means, and a verifier must not
depend on a third party's server being up. ``load_document`` serves a bundled
context and refuses every other URL (``Malformed``).

Canonicalisation is PyLD's (JSON-LD 1.1 expansion, deserialisation to RDF,
URDNA2015, which RDFC-1.0 standardised), with a work budget (``_Bounded``)
against crafted files. Where JSON-LD would quietly drop part
of a document, so that it is in the file but not signed, ``canonical_nquads``
refuses it instead, as Digital Bazaar's ``safe`` mode does: a term the contexts
do not define, a keyword we do not use, a ``null``, an identifier or type that is
not an absolute IRI, an inline or unknown ``@context``. It also refuses the C0
controls other than tab, line feed and carriage return, which RDFC-1.0 escapes
as ``\\u00XX`` and PyLD writes raw: none of our texts holds one (``names``
refuses them in a name), and a hash over a different escape would not verify
elsewhere.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from pyld import jsonld
from pyld.canon import URDNA2015

CONTEXTS_DIR = Path(__file__).resolve().parent / "contexts"
VC_CONTEXT = "https://www.w3.org/ns/credentials/v2"
OB_CONTEXT = "https://purl.imsglobal.org/spec/ob/v3p0/context-3.0.3.json"
BUNDLED = {
    VC_CONTEXT: "credentials-v2.jsonld",
    OB_CONTEXT: "ob-v3p0-context-3.0.3.json",
}
# The @context lists a signed document of ours may have: a credential, a status list.
CONTEXT_LISTS = ([VC_CONTEXT, OB_CONTEXT], [VC_CONTEXT])
# Characters whose escape in canonical N-Quads RDFC-1.0 fixes and PyLD does not.
_UNESCAPED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class LinkedDataError(ValueError):
    """A document that cannot be canonicalised as it stands, or would lose part
    of itself on the way (so not all of it would be signed)."""


@functools.cache
def bundled_context(url: str) -> dict[str, Any]:
    """The bundled context document of ``url`` (``LinkedDataError`` for any other)."""
    name = BUNDLED.get(url)
    if name is None:
        raise LinkedDataError(f"context {url[:200]!r} is not one of the bundled contexts; nothing is fetched")
    return json.loads((CONTEXTS_DIR / name).read_text(encoding="utf-8"))


def load_document(url: str, _options: dict[str, Any] | None = None) -> dict[str, Any]:
    """PyLD's document loader: a bundled context, or ``LinkedDataError``."""
    return {"contextUrl": None, "documentUrl": url, "document": bundled_context(url)}


def _check_json(value: Any, path: str = "") -> None:
    """What expansion would drop without a word, in the document as written.
    The one keyword our documents use is the top-level ``@context``."""
    if value is None:
        raise LinkedDataError(f"null at {path or '/'}: JSON-LD drops it, so it would not be signed")
    if isinstance(value, str):
        if _UNESCAPED.search(value):
            raise LinkedDataError(f"a control character at {path or '/'} has no agreed canonical form")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}/{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            if _UNESCAPED.search(key):
                raise LinkedDataError(f"a control character in a key at {path or '/'}")
            if key.startswith("@") and (key, path) != ("@context", ""):
                raise LinkedDataError(f"keyword {key[:40]!r} at {path or '/'} is not one we use")
            if key != "@context":
                _check_json(item, f"{path}/{key}")


def _absolute(iri: Any) -> bool:
    return isinstance(iri, str) and (iri.startswith("_:") or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", iri) is not None)


def _check_expanded(value: Any) -> None:
    """Every node id and type in the expanded form must be an absolute IRI: a
    relative one is dropped on the way to RDF (and so would go unsigned)."""
    if isinstance(value, list):
        for item in value:
            _check_expanded(item)
    elif isinstance(value, dict):
        if "@id" in value and not _absolute(value["@id"]):
            raise LinkedDataError(f"identifier {str(value['@id'])[:80]!r} is not an absolute IRI")
        types = value.get("@type", [])
        if "@value" not in value:  # a literal's @type is its datatype, checked by PyLD
            for t in types if isinstance(types, list) else [types]:
                if not _absolute(t):
                    raise LinkedDataError(f"type {str(t)[:80]!r} is not defined by the contexts")
        for key, item in value.items():
            if key not in ("@id", "@type", "@value", "@language", "@direction"):
                _check_expanded(item)


class _Bounded(URDNA2015):
    """URDNA2015 (RDFC-1.0) with a work budget, as RDFC-1.0 section 4.4 asks of
    an implementation that reads untrusted data (Digital Bazaar's rdf-canonize
    has one, PyLD none): blank nodes that only their place in the graph tells
    apart make the "Hash N-Degree Quads" step factorial, so a crafted file of a
    few hundred bytes could keep a verifier busy for hours. Our documents never
    need that step (every blank node has its own first-degree hash); a small
    budget of it is allowed, and more is refused."""

    MAX_CALLS_PER_NODE = 4  # N-degree hashes per blank node
    MAX_GROUP = 5  # blank nodes sharing one related hash (their permutations: 5! = 120)

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def hash_n_degree_quads(self, id_, issuer):
        self.calls += 1
        if self.calls > self.MAX_CALLS_PER_NODE * max(1, len(self.blank_node_info)):
            raise LinkedDataError("the document's blank nodes need too much work to canonicalise")
        return super().hash_n_degree_quads(id_, issuer)

    def create_hash_to_related(self, id_, issuer):
        related = super().create_hash_to_related(id_, issuer)
        if any(len(nodes) > self.MAX_GROUP for nodes in related.values()):
            raise LinkedDataError("the document's blank nodes need too much work to canonicalise")
        return related


def canonicalize_dataset(dataset: dict[str, Any]) -> str:
    """RDFC-1.0 canonical N-Quads of a PyLD RDF dataset, within ``_Bounded``'s budget."""
    return _Bounded().main(dataset, {"format": "application/n-quads"})


def _dropped(term: str | None) -> None:
    raise LinkedDataError(f"term {str(term)[:80]!r} is not defined by the contexts, so it would not be signed")


def canonical_nquads(document: dict[str, Any]) -> str:
    """The RDFC-1.0 canonical N-Quads of ``document`` (JSON-LD with only bundled
    contexts), or ``LinkedDataError`` when any of it would go unsigned."""
    contexts = document.get("@context")
    if contexts not in CONTEXT_LISTS:
        raise LinkedDataError("@context must be exactly the bundled VC 2.0 (and Open Badges 3.0) contexts")
    _check_json(document)
    options = {"documentLoader": load_document, "base": None}
    processor = jsonld.JsonLdProcessor(on_property_dropped=_dropped)
    try:
        _check_expanded(processor.expand(document, options))
        dataset = processor.to_rdf(document, {**options, "produceGeneralizedRdf": False})
    except LinkedDataError:
        raise
    except jsonld.JsonLdError as e:
        raise LinkedDataError(f"not valid JSON-LD: {_cause(e)}") from e
    return canonicalize_dataset(dataset)


def _cause(error: BaseException) -> str:
    """The innermost message of PyLD's chained errors (a refused context is one)."""
    while isinstance(error, jsonld.JsonLdError) and isinstance(error.cause, BaseException):
        error = error.cause
    return str(error).splitlines()[0][:300]
