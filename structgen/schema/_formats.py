"""`format` values as regular languages over decoded strings.

Each language is a subset of what jsonschema's `FORMAT_CHECKER` accepts (so an accepted string
always validates), and equal to it where the checker is itself regular: `date` (with real month
lengths and leap years), `time`/`date-time` (RFC 3339 as `rfc3339-validator` reads it, `T`/`Z` in
either case), `ipv4` (no leading zeros, as `ipaddress`), `ipv6`, `uuid`. Formats the installed
checker does not judge (`uri`, `hostname`, `duration`, `email` beyond "has an @") get the RFC
grammar. See docs/design/json-schema.md (formats) for the gaps.
"""

from __future__ import annotations

from functools import lru_cache

from structgen.automata import CharClass, Node, Repeat, parse_regex

__all__ = ["KNOWN_UNSUPPORTED", "format_nodes"]

_YEAR = r"(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MD = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
DATE = rf"(?:{_YEAR}-{_MD}|{_LEAP}-02-29)"
_TIME = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
DATE_TIME = rf"{DATE}[Tt]{_TIME}"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H}:{_H}|{IPV4})"
IPV6 = (
    rf"(?:(?:{_H}:){{6}}{_LS32}"
    rf"|::(?:{_H}:){{5}}{_LS32}"
    rf"|(?:{_H})?::(?:{_H}:){{4}}{_LS32}"
    rf"|(?:(?:{_H}:){{0,1}}{_H})?::(?:{_H}:){{3}}{_LS32}"
    rf"|(?:(?:{_H}:){{0,2}}{_H})?::(?:{_H}:){{2}}{_LS32}"
    rf"|(?:(?:{_H}:){{0,3}}{_H})?::{_H}:{_LS32}"
    rf"|(?:(?:{_H}:){{0,4}}{_H})?::{_LS32}"
    rf"|(?:(?:{_H}:){{0,5}}{_H})?::{_H}"
    rf"|(?:(?:{_H}:){{0,6}}{_H})?::)"
)
UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*"
# RFC 5321 dot-atom local part @ hostname or address literal
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
EMAIL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{HOSTNAME}|\[{IPV4}\]|\[IPv6:{IPV6}\])"
# ... and the part of it that ajv-formats' email accepts too: a dotted domain name, no address
# literal (what generate mode offers: valid under every validator a user may run)
EMAIL_EVERY_VALIDATOR = rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})+"
# RFC 3339 appendix A
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = r"(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
DURATION = rf"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"
# RFC 3986 (URIs) and RFC 3987 (IRIs: the same grammar with non-ASCII "ucschar" among the
# unreserved characters, and private-use characters in the query)
_UCSCHAR = "\xa0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef" + "".join(
    f"{chr(plane << 16)}-{chr((plane << 16) | 0xFFFD)}" for plane in range(1, 15)
).replace(chr(0xE0000), chr(0xE1000))
_IPRIVATE = "\ue000-\uf8ff" + f"{chr(0xF0000)}-{chr(0xFFFFD)}{chr(0x100000)}-{chr(0x10FFFD)}"
_SUB = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*"


def _uri_grammar(unreserved: str, private: str) -> tuple[str, str]:
    """(absolute, reference) patterns of RFC 3986 with these unreserved characters (a class
    body) and these extra query characters (RFC 3987's iprivate; empty for URIs)."""
    pchar = rf"(?:[{unreserved}{_SUB}:@]|{_PCT})"
    userinfo = rf"(?:[{unreserved}{_SUB}:]|{_PCT})*"
    regname = rf"(?:[{unreserved}{_SUB}]|{_PCT})*"
    ip_literal = rf"\[(?:{IPV6}|[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~{_SUB}:]+)\]"
    host = rf"(?:{ip_literal}|{IPV4}|{regname})"
    authority = rf"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    segment = rf"{pchar}*"
    segment_nz = rf"{pchar}+"
    segment_nz_nc = rf"(?:[{unreserved}{_SUB}@]|{_PCT})+"
    path_abempty = rf"(?:/{segment})*"
    path_absolute = rf"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = rf"{segment_nz}(?:/{segment})*"
    path_noscheme = rf"{segment_nz_nc}(?:/{segment})*"
    query = rf"(?:{pchar}|[/?{private}])*" if private else rf"(?:{pchar}|[/?])*"
    fragment = rf"(?:{pchar}|[/?])*"
    hier = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)"
    absolute = rf"{_SCHEME}:{hier}(?:\?{query})?(?:#{fragment})?"
    relative = (
        rf"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|)"
        rf"(?:\?{query})?(?:#{fragment})?"
    )
    return absolute, rf"(?:{absolute}|{relative})"


URI, URI_REFERENCE = _uri_grammar(r"A-Za-z0-9\-._~", "")
IRI, IRI_REFERENCE = _uri_grammar(rf"A-Za-z0-9\-._~{_UCSCHAR}", _IPRIVATE)
# RFC 6570 (level 4); the apostrophe among the literals as the JSON Schema test suite has it
_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
URI_TEMPLATE = (
    rf"(?:[!#$&-;=?-\[\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{_PCT}"
    rf"|\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}})*"
)
JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{JSON_POINTER})"

_FORMATS: dict[str, str] = {
    "date": DATE,
    "time": _TIME,
    "date-time": DATE_TIME,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "uuid": UUID,
    "hostname": HOSTNAME,
    "email": EMAIL,
    "duration": DURATION,
    "uri": URI,
    "uri-reference": URI_REFERENCE,
    "iri": IRI,
    "iri-reference": IRI_REFERENCE,
    "uri-template": URI_TEMPLATE,
    "json-pointer": JSON_POINTER,
    "relative-json-pointer": RELATIVE_JSON_POINTER,
}
# Generate mode: where validators disagree, the strictest reading.
_GENERATE_FORMATS: dict[str, str] = {"email": EMAIL_EVERY_VALIDATOR}
# Formats that jsonschema's checker may judge but that have no regular language here.
KNOWN_UNSUPPORTED = frozenset({"regex", "idn-email", "idn-hostname"})


@lru_cache(maxsize=64)
def format_nodes(name: str, *, generate: bool = False) -> tuple[Node, ...] | None:
    """The decoded-string languages whose intersection is `format: name` (None: unknown);
    with `generate`, only what every validator accepts (`email`: a dotted domain, as ajv)."""
    pattern = (_GENERATE_FORMATS.get(name) if generate else None) or _FORMATS.get(name)
    if pattern is None:
        return None
    node = parse_regex(pattern, flags="s")
    if name == "hostname":  # at most 253 characters in all
        return (node, Repeat(CharClass(((0, 0x10FFFF),)), 1, 253))
    return (node,)
