"""Which license a repository carries, and whether the build may use it.

Two kinds of evidence, each turned into an SPDX identifier (or a family name such as
``BSD`` or ``GPL`` when the version is not stated):

* the text of its license files (``LICENSE``, ``COPYING``, ...), recognised by phrases
  that only one license uses (:func:`identify_license_text`);
* its metadata: ``License-Expression`` (SPDX), the free-text ``License`` field and the
  ``License ::`` trove classifiers (:func:`license_from_metadata`).

:func:`combine_license_evidence` reconciles them (the file text wins a conflict: it is
what the authors actually granted) and :func:`check_license` applies the policy.

Classification: permissive licenses ask only for attribution; copyleft licenses require
derived work to carry the same license. MPL-2.0 is a *weak*, file-level copyleft, and we
count it as copyleft: a task embeds a modified copy of the file's function, which MPL
keeps under MPL, so redistributing task sets under another license would not be allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from gym_repost.construct.stages import LicenseKind
from gym_repost.errors import BuildError, ConfigError

LicensePolicy = Literal["permissive", "any"] | frozenset[str]
"""``"permissive"`` (the default), ``"any"``, or a set of SPDX ids (kind names such as
``permissive`` or ``copyleft`` may be among them)."""

PROPRIETARY = "LicenseRef-Proprietary"
PUBLIC_DOMAIN = "LicenseRef-Public-Domain"

_PERMISSIVE = {
    "MIT",
    "MIT-0",
    "BSD",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "BSD-4-Clause",
    "0BSD",
    "Apache",
    "Apache-1.1",
    "Apache-2.0",
    "ISC",
    "PSF-2.0",
    "Python-2.0",
    "Unlicense",
    "Zlib",
    "CC0-1.0",
    "BSL-1.0",
    "WTFPL",
    "X11",
    "NCSA",
    "UPL-1.0",
    "HPND",
    PUBLIC_DOMAIN,
}
_COPYLEFT_FAMILIES = ("GPL", "LGPL", "AGPL", "GFDL", "MPL", "EPL", "CDDL", "EUPL", "OSL", "CC-BY-SA")
_KNOWN_IDS = {i.casefold(): i for i in _PERMISSIVE | {PROPRIETARY}}


def _words(text: str) -> str:
    """Lower-case words and version numbers separated by single spaces, padded by one."""
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text.lower())
    return " " + " ".join(re.sub(r"[^a-z0-9.]+", " ", text).split()) + " "


@dataclass(frozen=True)
class _TextRule:
    """A license recognised by one of ``anchors``; ``requires`` tells apart licenses that
    share an anchor. ``versioned``: the id is the family name plus the version number
    stated right after the anchor."""

    spdx: str
    anchors: tuple[str, ...]
    requires: tuple[str, ...] = ()
    versioned: bool = False


_REDISTRIBUTION = (
    "redistribution and use in source and binary forms, with or without modification, are permitted provided that",
)
_MIT_GRANT = ("permission is hereby granted, free of charge, to any person obtaining a copy",)
_ISC_GRANT = ("distribute this software for any purpose with or without fee is hereby granted",)

# Order breaks ties between rules matching at the same place: the more demanding first.
_TEXT_RULES = (
    _TextRule("AGPL", ("gnu affero general public license",), versioned=True),
    _TextRule("LGPL", ("gnu lesser general public license", "gnu library general public license"), versioned=True),
    _TextRule("GPL", ("gnu general public license",), versioned=True),
    _TextRule("GFDL", ("gnu free documentation license",), versioned=True),
    _TextRule("MPL", ("mozilla public license",), versioned=True),
    _TextRule("EPL", ("eclipse public license",), versioned=True),
    _TextRule("Apache", ("apache license",), versioned=True),
    _TextRule(
        "BSD-4-Clause",
        _REDISTRIBUTION,
        requires=("all advertising materials mentioning features or use of this software",),
    ),
    _TextRule("BSD-3-Clause", _REDISTRIBUTION, requires=("endorse or promote products derived from this software",)),
    _TextRule("BSD-2-Clause", _REDISTRIBUTION),
    _TextRule("MIT", _MIT_GRANT, requires=("the above copyright notice and this permission notice shall be included",)),
    _TextRule(
        "MIT-0",
        _MIT_GRANT,
        requires=('persons to whom the software is furnished to do so. the software is provided "as is"',),
    ),
    _TextRule(
        "ISC", _ISC_GRANT, requires=("provided that the above copyright notice and this permission notice appear",)
    ),
    _TextRule("0BSD", _ISC_GRANT),
    _TextRule(
        "PSF-2.0",
        (
            "python software foundation license version 2",
            "this license agreement is between the python software foundation",
        ),
    ),
    _TextRule("Unlicense", ("this is free and unencumbered software released into the public domain",)),
    _TextRule(
        "Zlib",
        (
            "altered source versions must be plainly marked as such, and must not be "
            "misrepresented as being the original software",
        ),
    ),
    _TextRule(
        "CC0-1.0",
        (
            "cc0 1.0 universal",
            "creative commons legal code cc0",
            "to the extent possible under law, the person who associated cc0",
            "creativecommons.org/publicdomain/zero/1.0",
        ),
    ),
    _TextRule("BSL-1.0", ("boost software license - version 1.0",)),
    _TextRule("WTFPL", ("do what the fuck you want to public license",)),
    _TextRule(
        PROPRIETARY,
        ("proprietary and confidential", "unauthorized copying of this file, via any medium, is strictly prohibited"),
    ),
)
# The version right after the name (``Apache License 2.0``), or the first one stated
# within a sentence (``GNU General Public License as published by ... either version 3``).
_VERSION_AFTER_ANCHOR = re.compile(r"^(?: (\d\.\d) |.{0,160}? (?:version|v) ?(\d+(?:\.\d+)?) )")


def _version_id(family: str, after_anchor: str) -> str:
    """``GPL`` + ``... version 3 ...`` -> ``GPL-3.0``; the bare family without a version."""
    match = _VERSION_AFTER_ANCHOR.match(after_anchor)
    if not match:
        return family
    version = match.group(1) or match.group(2)
    return f"{family}-{version if '.' in version else version + '.0'}"


def _rule_match(rule: _TextRule, words: str) -> tuple[int, str] | None:
    """Where ``rule`` first matches the normalised text, and the id it gives."""
    found = [(at, anchor) for anchor in map(_words, rule.anchors) if (at := words.find(anchor)) >= 0]
    if not found or any(_words(p) not in words for p in rule.requires):
        return None
    at, anchor = min(found)
    spdx = _version_id(rule.spdx, words[at + len(anchor) - 1 :]) if rule.versioned else rule.spdx
    return at, spdx


def identify_license_text(text: str) -> str | None:
    """The license a license file's text grants, or None when it is not recognised.

    The license named first wins: the GPL text mentions the Lesser and Affero GPLs near
    its end, a project's LICENSE may append the licenses of vendored code.
    A very short text is read as a license name (whole, or its first line:
    ``MIT License`` above a copyright line).
    """
    words = _words(text)
    matches = [m for rule in _TEXT_RULES if (m := _rule_match(rule, words))]
    if matches:
        return min(matches, key=lambda m: m[0])[1]
    if len(words) > 80:
        return None
    first_line = next((line for line in text.splitlines() if line.strip()), "")
    return license_from_name(text) or license_from_name(first_line)


_NAME_STOPWORDS = {
    "the",
    "license",
    "licence",
    "licensed",
    "under",
    "version",
    "software",
    "osi",
    "approved",
    "terms",
    "of",
    "a",
    "an",
    "style",
}
_NAME_KEYS = {
    "mit": "MIT",
    "mit mit": "MIT",
    "expat": "MIT",
    "mit 0": "MIT-0",
    "mit no attribution": "MIT-0",
    "bsd": "BSD",
    "bsd like": "BSD",
    "bsd 3 clause": "BSD-3-Clause",
    "3 clause bsd": "BSD-3-Clause",
    "bsd 3": "BSD-3-Clause",
    "new bsd": "BSD-3-Clause",
    "modified bsd": "BSD-3-Clause",
    "revised bsd": "BSD-3-Clause",
    "bsd 2 clause": "BSD-2-Clause",
    "2 clause bsd": "BSD-2-Clause",
    "bsd 2": "BSD-2-Clause",
    "simplified bsd": "BSD-2-Clause",
    "freebsd": "BSD-2-Clause",
    "0bsd": "0BSD",
    "bsd 0 clause": "0BSD",
    "zero clause bsd": "0BSD",
    "bsd 4 clause": "BSD-4-Clause",
    "apache": "Apache",
    "apache 2": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache2": "Apache-2.0",
    "asl 2.0": "Apache-2.0",
    "apache v2": "Apache-2.0",
    "isc": "ISC",
    "iscl": "ISC",
    "isc iscl": "ISC",
    "psf": "PSF-2.0",
    "psfl": "PSF-2.0",
    "psf 2.0": "PSF-2.0",
    "python foundation": "PSF-2.0",
    "python foundation 2": "PSF-2.0",
    "unlicense": "Unlicense",
    "unlicense unlicense": "Unlicense",
    "public domain": PUBLIC_DOMAIN,
    "cc0": "CC0-1.0",
    "cc0 1.0": "CC0-1.0",
    "cc0 1.0 universal": "CC0-1.0",
    "zlib": "Zlib",
    "zlib libpng": "Zlib",
    "mpl": "MPL",
    "mpl 2.0": "MPL-2.0",
    "mpl2": "MPL-2.0",
    "mozilla public 2.0": "MPL-2.0",
    "boost": "BSL-1.0",
    "boost 1.0": "BSL-1.0",
    "bsl 1.0": "BSL-1.0",
    "wtfpl": "WTFPL",
    "proprietary": PROPRIETARY,
    "commercial": PROPRIETARY,
    "all rights reserved": PROPRIETARY,
    "other proprietary": PROPRIETARY,
}
_GNU_NAME = re.compile(
    r"^(?:gnu )?(?:(?P<short>a|l)?gpl|(?P<long>affero |lesser |library |library or lesser )?general public)"
    r"(?: ?v ?| )?(?P<version>\d(?:\.\d)?)?(?P<later> ?\+| or later| or any later)?(?: only)?"
    r"(?: (?:a|l)?gpl ?v?\d?(?:\.\d)?\+?)?$"
)
_GNU_FAMILY = {
    "a": "AGPL",
    "l": "LGPL",
    "affero": "AGPL",
    "lesser": "LGPL",
    "library": "LGPL",
    "library or lesser": "LGPL",
    "": "GPL",
}


def _gnu_name(key: str) -> str | None:
    """``gplv3+`` / ``gnu lesser general public v2.1`` -> ``GPL-3.0-or-later`` / ``LGPL-2.1``."""
    match = _GNU_NAME.match(key)
    if not match:
        return None
    family = _GNU_FAMILY[(match.group("short") or match.group("long") or "").strip()]
    version = match.group("version")
    if not version:
        return family
    spdx = f"{family}-{version if '.' in version else version + '.0'}"
    return spdx + "-or-later" if match.group("later") else spdx


def license_from_name(name: str) -> str | None:
    """The SPDX id a license *name* means (``The MIT License`` -> ``MIT``), or None.

    Also reads SPDX ids themselves and ``A or B`` (-> ``A OR B`` when both are known).
    """
    name = name.strip()
    if not name:
        return None
    known = _KNOWN_IDS.get(name.casefold()) or _spdx_family_id(name)
    if known:
        return known
    parts = re.split(r"\s+or\s+|\s*/\s*(?=\D)", name, flags=re.IGNORECASE)
    ids = [license_from_name(p) for p in parts] if len(parts) > 1 else []
    if ids and all(ids):
        return " OR ".join(ids)  # type: ignore[arg-type]
    words = re.sub(r"[^a-z0-9.+]+", " ", name.lower().replace("(", " ").replace(")", " "))
    key = " ".join(w for w in words.replace("+", " +").split() if w not in _NAME_STOPWORDS)
    key = key.replace(" +", "+")
    return _NAME_KEYS.get(key) or _gnu_name(key)


def _spdx_family_id(name: str) -> str | None:
    """An SPDX id of a family we classify (``GPL-3.0-only``, ``EPL-2.0``) in its canonical case."""
    for family in _COPYLEFT_FAMILIES:
        match = re.fullmatch(rf"{re.escape(family)}(-\d(?:\.\d)?(?:-only|-or-later|\+)?)?", name, re.IGNORECASE)
        if match:
            return family + (match.group(1) or "")
    return None


_CLASSIFIER_PREFIX = "License :: "


def license_from_classifiers(classifiers: Iterable[str]) -> str | None:
    """The license the ``License ::`` trove classifiers name (several: joined with OR)."""
    ids: list[str] = []
    for classifier in classifiers:
        if not classifier.startswith(_CLASSIFIER_PREFIX):
            continue
        leaf = classifier.rsplit("::", 1)[1].strip()
        found = _CLASSIFIER_LEAVES.get(leaf) or license_from_name(leaf)
        if found and found not in ids:
            ids.append(found)
    return " OR ".join(ids) if ids else None


_CLASSIFIER_LEAVES = {
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "BSD License": "BSD",
    "Apache Software License": "Apache",
    "ISC License (ISCL)": "ISC",
    "Python Software Foundation License": "PSF-2.0",
    "The Unlicense (Unlicense)": "Unlicense",
    "zlib/libpng License": "Zlib",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "Mozilla Public License 1.1 (MPL 1.1)": "MPL-1.1",
    "GNU General Public License (GPL)": "GPL",
    "GNU General Public License v2 (GPLv2)": "GPL-2.0",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0",
    "GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "GNU Library or Lesser General Public License (LGPL)": "LGPL",
    "GNU Lesser General Public License v2 (LGPLv2)": "LGPL-2.0",
    "GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.0-or-later",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "GNU Affero General Public License v3": "AGPL-3.0",
    "GNU Affero General Public License v3 or later (AGPLv3+)": "AGPL-3.0-or-later",
    "Eclipse Public License 1.0 (EPL-1.0)": "EPL-1.0",
    "Eclipse Public License 2.0 (EPL-2.0)": "EPL-2.0",
    "Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
    "Public Domain": PUBLIC_DOMAIN,
    "Other/Proprietary License": PROPRIETARY,
}


def license_from_metadata(
    *, expression: str | None = None, license_field: str | None = None, classifiers: Iterable[str] = ()
) -> str | None:
    """The license package metadata declares, or None.

    Args:
        expression: ``License-Expression`` (core metadata 2.4) or pyproject's
            ``license = "..."``: an SPDX expression, taken as it is.
        license_field: the free-text ``License`` field (or ``license = {text = ...}``):
            a name, an SPDX id, or a whole license text.
        classifiers: trove classifiers; the ``License ::`` ones are read.

    A generic name (``BSD``) gives way to a more specific one from another field
    (``BSD-3-Clause``).
    """
    if expression and expression.strip():
        return expression.strip()
    from_field = None
    if license_field and license_field.strip().upper() not in {"UNKNOWN", "NONE", ""}:
        text = license_field.strip()
        from_field = identify_license_text(text) if len(text) > 120 else license_from_name(text)
        if from_field is None and len(text) <= 120:
            from_field = text
    from_classifiers = license_from_classifiers(classifiers)
    if from_field and from_classifiers and _same_license(from_field, from_classifiers):
        return max(from_field, from_classifiers, key=len)
    return from_field or from_classifiers


def _same_license(a: str, b: str) -> bool:
    """Same id, or one is the other's family or version range (``GPL`` ~ ``GPL-3.0-only``)."""
    a, b = a.casefold(), b.casefold()
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")


def license_kind(expression: str | None) -> LicenseKind:
    """Classify an SPDX expression: OR takes the most permissive choice, AND the most
    restrictive part; ``WITH`` exceptions keep the license's kind. None or an unparsable
    expression: ``unknown`` (unless it is one id we know)."""
    if not expression:
        return "unknown"
    try:
        return _RANKS[_evaluate(_parse_expression(expression), _rank_of_id, min, max)]  # type: ignore[return-value]
    except ValueError:
        return _RANKS[_rank_of_id(expression)]  # type: ignore[return-value]


_RANKS = ("permissive", "unknown", "copyleft", "proprietary")


def license_id_kind(spdx: str) -> LicenseKind:
    """The kind of one license id (``GPL-3.0-or-later`` -> ``copyleft``)."""
    if spdx.casefold() in _KNOWN_IDS:
        return "proprietary" if _KNOWN_IDS[spdx.casefold()] == PROPRIETARY else "permissive"
    upper = spdx.upper()
    if upper.startswith("LICENSEREF-") and "PROPRIETARY" in upper:
        return "proprietary"
    if any(upper == f or upper.startswith(f + "-") or upper.startswith(f + "+") for f in _COPYLEFT_FAMILIES):
        return "copyleft"
    if any(upper.startswith(f) for f in ("BSD-", "APACHE-", "MIT-", "CC0")):
        return "permissive"
    return "unknown"


def _rank_of_id(spdx: str) -> int:
    return _RANKS.index(license_id_kind(spdx))


_TOKEN = re.compile(r"\(|\)|[^\s()]+")
Expr = tuple[str, list["Expr"]] | str


def _parse_expression(text: str) -> Expr:
    """An SPDX expression as nested ``("OR"|"AND", parts)`` tuples over ids.

    Raises:
        ValueError: it is not a well-formed expression.
    """
    tokens = _TOKEN.findall(text)
    expr, rest = _parse_or(tokens)
    if rest or not tokens:
        raise ValueError(f"not an SPDX expression: {text!r}")
    return expr


def _parse_or(tokens: list[str]) -> tuple[Expr, list[str]]:
    parts = []
    part, tokens = _parse_and(tokens)
    parts.append(part)
    while tokens and tokens[0].upper() == "OR":
        part, tokens = _parse_and(tokens[1:])
        parts.append(part)
    return (parts[0] if len(parts) == 1 else ("OR", parts)), tokens


def _parse_and(tokens: list[str]) -> tuple[Expr, list[str]]:
    parts = []
    part, tokens = _parse_atom(tokens)
    parts.append(part)
    while tokens and tokens[0].upper() == "AND":
        part, tokens = _parse_atom(tokens[1:])
        parts.append(part)
    return (parts[0] if len(parts) == 1 else ("AND", parts)), tokens


def _parse_atom(tokens: list[str]) -> tuple[Expr, list[str]]:
    if not tokens or tokens[0] in {")"} or tokens[0].upper() in {"AND", "OR", "WITH"}:
        raise ValueError("an SPDX expression is missing a license id")
    if tokens[0] == "(":
        expr, rest = _parse_or(tokens[1:])
        if not rest or rest[0] != ")":
            raise ValueError("unbalanced parenthesis in an SPDX expression")
        return expr, rest[1:]
    if len(tokens) >= 3 and tokens[1].upper() == "WITH":
        return tokens[0], tokens[3:]
    return tokens[0], tokens[1:]


def _evaluate(expr: Expr, leaf: Callable[[str], int], any_of: Callable, all_of: Callable) -> int:
    """Fold an expression: ``leaf`` on ids, ``any_of`` over OR parts, ``all_of`` over AND."""
    if isinstance(expr, str):
        return leaf(expr)
    op, parts = expr
    values = [_evaluate(p, leaf, any_of, all_of) for p in parts]
    return any_of(values) if op == "OR" else all_of(values)


@dataclass(frozen=True)
class DetectedLicense:
    """What a repository's license files and metadata say, reconciled.

    Attributes:
        license: an SPDX expression or id (or the license's name), None when none found.
        kind: permissive, copyleft, proprietary or unknown.
        notes: how it was decided, and any disagreement between the sources.
        unrecognised_files: license files whose text matched no known license.
    """

    license: str | None
    kind: LicenseKind
    notes: tuple[str, ...] = ()
    unrecognised_files: tuple[str, ...] = ()


def combine_license_evidence(files: dict[str, str | None], metadata: str | None) -> DetectedLicense:
    """Reconcile license files (path -> recognised id, None when not recognised) with the
    license the metadata declares.

    Both agree: the more specific of the two (``BSD`` + ``BSD-3-Clause`` -> ``BSD-3-Clause``;
    a metadata expression that covers every file's license is kept whole). They disagree:
    the file text wins, and a note says so. Several files with different licenses and no
    metadata covering them: all of them apply (AND).
    """
    unrecognised = tuple(p for p, spdx in files.items() if spdx is None)
    notes = [f"{p}: license text not recognised" for p in unrecognised]
    file_ids = list(dict.fromkeys(spdx for spdx in files.values() if spdx))
    meta_ids = _expression_ids(metadata) if metadata else []
    if not file_ids:
        chosen = metadata
    elif metadata and all(any(_same_license(f, m) for m in meta_ids) for f in file_ids):
        chosen = max(metadata, file_ids[0], key=len) if len(meta_ids) == 1 == len(file_ids) else metadata
    else:
        chosen = " AND ".join(file_ids)
        if metadata:
            notes.append(f"the metadata says {metadata} but the license file says {chosen}; going by the license file")
    return DetectedLicense(chosen, license_kind(chosen), tuple(notes), unrecognised)


def _expression_ids(expression: str) -> list[str]:
    """The license ids an expression names (the whole text when it does not parse)."""
    try:
        expr = _parse_expression(expression)
    except ValueError:
        return [expression]

    def leaves(node: Expr) -> list[str]:
        return [node] if isinstance(node, str) else [i for part in node[1] for i in leaves(part)]

    return leaves(expr)


def parse_license_policy(value: str | Iterable[str]) -> LicensePolicy:
    """``"permissive"``, ``"any"``, or SPDX ids (a comma-separated string or an iterable).

    Raises:
        ConfigError: the value names nothing.
    """
    if isinstance(value, str):
        if value.strip().lower() in {"permissive", "any"}:
            return value.strip().lower()  # type: ignore[return-value]
        value = value.split(",")
    ids = frozenset(v.strip() for v in value if v.strip())
    if not ids:
        raise ConfigError(
            "--licenses needs 'permissive', 'any' or a comma-separated list of SPDX ids (e.g. MIT,BSD-3-Clause)"
        )
    return ids


def license_allowed(detected: DetectedLicense, policy: LicensePolicy) -> bool:
    """Whether ``policy`` lets the build use a repository with this license."""
    if policy == "any":
        return True
    if detected.license is None:
        return False
    if policy == "permissive":
        return detected.kind == "permissive"
    wanted = {p.casefold() for p in policy}

    def allowed(spdx: str) -> int:
        bare = re.sub(r"(-only|-or-later|\+)$", "", spdx, flags=re.IGNORECASE).casefold()
        return int(spdx.casefold() in wanted or bare in wanted or license_id_kind(spdx) in wanted)

    try:
        return bool(_evaluate(_parse_expression(detected.license), allowed, max, min))
    except ValueError:
        return bool(allowed(detected.license))


def check_license(name: str, detected: DetectedLicense, policy: LicensePolicy) -> None:
    """Refuse a repository whose license the policy does not allow.

    Raises:
        BuildError: the license is not allowed, or there is no license to go by; the
            message says which and how to build it anyway.
    """
    if license_allowed(detected, policy):
        return
    if detected.license is None:
        raise BuildError(_no_license_message(name, detected))
    if policy == "permissive":
        what = f"{detected.kind}" if detected.kind != "unknown" else "a license gym-repost cannot classify"
        raise BuildError(
            f"{name} is licensed {detected.license} ({what}); gym-repost keeps permissive "
            "licenses by default; pass --licenses any to build it anyway"
        )
    listed = ",".join(sorted(policy))
    raise BuildError(
        f"{name} is licensed {detected.license} ({detected.kind}), which is not among "
        f"--licenses {listed}; add it to the list or pass --licenses any to build it anyway"
    )


def _no_license_message(name: str, detected: DetectedLicense) -> str:
    if detected.unrecognised_files:
        found = (
            f"its license file ({', '.join(detected.unrecognised_files)}) matches no license "
            "gym-repost recognises and its metadata names none"
        )
    else:
        found = "it has no LICENSE or COPYING file and its metadata names no license"
    return (
        f"{name} has no license gym-repost can detect: {found}; code without a license cannot be "
        "redistributed as tasks, so it is refused by default; pass --licenses any to build it anyway"
    )
