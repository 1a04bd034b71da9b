"""License recognition from texts and metadata, classification, and the build's policy."""

from __future__ import annotations

import pytest

from gym_repost.construct.licenses import (
    PROPRIETARY,
    DetectedLicense,
    check_license,
    combine_license_evidence,
    identify_license_text,
    license_allowed,
    license_from_classifiers,
    license_from_metadata,
    license_from_name,
    license_id_kind,
    license_kind,
    parse_license_policy,
)
from gym_repost.errors import BuildError, ConfigError

# Short excerpts of each license: the title and the sentences that set it apart.
MIT = """MIT License

Copyright (c) 2021 Jane Doe

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
"""
MIT_0 = """Copyright 2021 Jane Doe

Permission is hereby granted, free of charge, to any person obtaining a copy of this
software and associated documentation files (the "Software"), to deal in the Software
without restriction, and to permit persons to whom the Software is furnished to do so.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
"""
BSD_2 = """Copyright (c) 2020, Jane Doe
All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this
   list of conditions and the following disclaimer.
2. Redistributions in binary form must reproduce the above copyright notice,
   this list of conditions and the following disclaimer in the documentation.
"""
BSD_3 = (
    BSD_2
    + """3. Neither the name of the copyright holder nor the names of its
   contributors may be used to endorse or promote products derived from
   this software without specific prior written permission.
"""
)
BSD_4 = (
    BSD_3
    + """4. All advertising materials mentioning features or use of this software
   must display the following acknowledgement: This product includes software
   developed by Jane Doe.
"""
)
APACHE = """
                                 Apache License
                           Version 2.0, January 2004
                        http://www.apache.org/licenses/

   TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION
"""
APACHE_NOTICE = """Copyright 2019 Acme

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
"""
ISC = """Copyright (c) 2018 Jane Doe

Permission to use, copy, modify, and/or distribute this software for any
purpose with or without fee is hereby granted, provided that the above
copyright notice and this permission notice appear in all copies.

THE SOFTWARE IS PROVIDED "AS IS" AND THE AUTHOR DISCLAIMS ALL WARRANTIES.
"""
ZERO_BSD = """Copyright (C) 2006 by Jane Doe

Permission to use, copy, modify, and/or distribute this software for any purpose
with or without fee is hereby granted.

THE SOFTWARE IS PROVIDED "AS IS" AND THE AUTHOR DISCLAIMS ALL WARRANTIES.
"""
PSF = """PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2
--------------------------------------------

1. This LICENSE AGREEMENT is between the Python Software Foundation
("PSF"), and the Individual or Organization ("Licensee") accessing and
otherwise using this software ("Python") in source or binary form.
"""
UNLICENSE = """This is free and unencumbered software released into the public domain.

Anyone is free to copy, modify, publish, use, compile, sell, or
distribute this software, either in source code form or as a compiled binary.
"""
ZLIB = """This software is provided 'as-is', without any express or implied
warranty. In no event will the authors be held liable for any damages.

1. The origin of this software must not be misrepresented.
2. Altered source versions must be plainly marked as such, and must not be
   misrepresented as being the original software.
3. This notice may not be removed or altered from any source distribution.
"""
CC0 = """Creative Commons Legal Code

CC0 1.0 Universal

    CREATIVE COMMONS CORPORATION IS NOT A LAW FIRM AND DOES NOT PROVIDE
    LEGAL SERVICES.
"""
MPL = """Mozilla Public License Version 2.0
==================================

1. Definitions
--------------

1.1. "Contributor"
    means each individual or legal entity that creates, contributes to
    the creation of, or owns Covered Software.
"""
MPL_NOTICE = """This Source Code Form is subject to the terms of the Mozilla Public
License, v. 2.0. If a copy of the MPL was not distributed with this
file, You can obtain one at http://mozilla.org/MPL/2.0/.
"""
LGPL_21 = """                  GNU LESSER GENERAL PUBLIC LICENSE
                       Version 2.1, February 1999

[This is the first released version of the Lesser GPL.  It also counts
 as the successor of the GNU Library Public License, version 2, hence
 the version number 2.1.]
"""
LGPL_3 = """                   GNU LESSER GENERAL PUBLIC LICENSE
                       Version 3, 29 June 2007

  This version of the GNU Lesser General Public License incorporates
the terms and conditions of version 3 of the GNU General Public
License, supplemented by the additional permissions listed below.
"""
GPL_2 = """                    GNU GENERAL PUBLIC LICENSE
                       Version 2, June 1991

  The licenses for most software are designed to take away your
freedom to share and change it.  (Some other Free Software Foundation
software is covered by the GNU Lesser General Public License instead.)
"""
GPL_3 = """                    GNU GENERAL PUBLIC LICENSE
                       Version 3, 29 June 2007

  The GNU General Public License is a free, copyleft license for
software and other kinds of works.

  13. Use with the GNU Affero General Public License.

But first, please read <https://www.gnu.org/licenses/why-not-lgpl.html>
if you would rather use the GNU Lesser General Public License instead of this License.
"""
GPL_NOTICE = """Copyright (C) 2020 Jane Doe

This program is free software: you can redistribute it and/or modify
it under the terms of the GNU General Public License as published by
the Free Software Foundation, either version 3 of the License, or
(at your option) any later version.
"""
AGPL = """                    GNU AFFERO GENERAL PUBLIC LICENSE
                       Version 3, 19 November 2007

  The GNU Affero General Public License is a free, copyleft license for
software and other kinds of works, specifically designed to ensure
cooperation with the community in the case of network server software.
"""
BOOST = """Boost Software License - Version 1.0 - August 17th, 2003

Permission is hereby granted, free of charge, to any person or organization
obtaining a copy of the software and accompanying documentation covered by
this license (the "Software") to use, reproduce, display, distribute.
"""
PROPRIETARY_TEXT = """Copyright (C) Acme Corp - All Rights Reserved
Unauthorized copying of this file, via any medium, is strictly prohibited
Proprietary and confidential
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (MIT, "MIT"),
        (MIT_0, "MIT-0"),
        (BSD_2, "BSD-2-Clause"),
        (BSD_3, "BSD-3-Clause"),
        (BSD_4, "BSD-4-Clause"),
        (APACHE, "Apache-2.0"),
        (APACHE_NOTICE, "Apache-2.0"),
        (ISC, "ISC"),
        (ZERO_BSD, "0BSD"),
        (PSF, "PSF-2.0"),
        (UNLICENSE, "Unlicense"),
        (ZLIB, "Zlib"),
        (CC0, "CC0-1.0"),
        (MPL, "MPL-2.0"),
        (MPL_NOTICE, "MPL-2.0"),
        (LGPL_21, "LGPL-2.1"),
        (LGPL_3, "LGPL-3.0"),
        (GPL_2, "GPL-2.0"),
        (GPL_3, "GPL-3.0"),
        (GPL_NOTICE, "GPL-3.0"),
        (AGPL, "AGPL-3.0"),
        (BOOST, "BSL-1.0"),
        (PROPRIETARY_TEXT, PROPRIETARY),
    ],
)
def test_license_texts_are_recognised(text: str, expected: str) -> None:
    assert identify_license_text(text) == expected


def test_recognition_survives_comment_markers_and_rewrapping() -> None:
    commented = "\n".join("# " + line for line in MIT.splitlines())
    rewrapped = " ".join(BSD_3.split())
    assert identify_license_text(commented) == "MIT"
    assert identify_license_text(rewrapped) == "BSD-3-Clause"


def test_the_license_named_first_wins() -> None:
    # A project's own MIT license followed by a vendored library's BSD license.
    assert identify_license_text(MIT + "\n---- vendored/x ----\n" + BSD_3) == "MIT"
    assert identify_license_text(BSD_3 + "\n" + MIT) == "BSD-3-Clause"


def test_short_texts_are_read_as_names_and_others_are_not_recognised() -> None:
    assert identify_license_text("MIT License\n\nCopyright (c) 2020 Jane Doe\n") == "MIT"
    assert identify_license_text("BSD 3-Clause License") == "BSD-3-Clause"
    assert identify_license_text("You may use this code if you buy me a beer.") is None
    assert identify_license_text("") is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MIT", "MIT"),
        ("The MIT License", "MIT"),
        ("MIT License (MIT)", "MIT"),
        ("Expat", "MIT"),
        ("BSD", "BSD"),
        ("new BSD License", "BSD-3-Clause"),
        ("BSD 2-Clause", "BSD-2-Clause"),
        ("Apache 2.0", "Apache-2.0"),
        ("Apache License, Version 2.0", "Apache-2.0"),
        ("apache-2.0", "Apache-2.0"),
        ("GPLv3", "GPL-3.0"),
        ("GPLv3+", "GPL-3.0-or-later"),
        ("GNU GPL v2", "GPL-2.0"),
        ("gpl-2.0-only", "GPL-2.0-only"),
        ("LGPLv2.1+", "LGPL-2.1-or-later"),
        ("AGPLv3", "AGPL-3.0"),
        ("MPL 2.0", "MPL-2.0"),
        ("ISC", "ISC"),
        ("PSF", "PSF-2.0"),
        ("Python Software Foundation License", "PSF-2.0"),
        ("Unlicense", "Unlicense"),
        ("zlib/libpng", "Zlib"),
        ("CC0", "CC0-1.0"),
        ("MIT or Apache 2.0", "MIT OR Apache-2.0"),
        ("Proprietary", PROPRIETARY),
        ("Some custom terms", None),
        ("", None),
    ],
)
def test_license_names(name: str, expected: str | None) -> None:
    assert license_from_name(name) == expected


def test_classifiers() -> None:
    assert (
        license_from_classifiers(["Programming Language :: Python", "License :: OSI Approved :: MIT License"]) == "MIT"
    )
    assert (
        license_from_classifiers(
            [
                "License :: OSI Approved :: GNU General Public License v3 (GPLv3)",
                "License :: OSI Approved :: MIT License",
            ]
        )
        == "GPL-3.0 OR MIT"
    )
    assert license_from_classifiers(["License :: OSI Approved :: BSD License"]) == "BSD"
    assert license_from_classifiers(["License :: OSI Approved"]) is None
    assert license_from_classifiers(["License :: Other/Proprietary License"]) == PROPRIETARY


def test_metadata_variants() -> None:
    assert license_from_metadata(expression=" MIT OR Apache-2.0 ", license_field="GPL") == "MIT OR Apache-2.0"
    assert license_from_metadata(license_field="MIT License") == "MIT"
    assert (
        license_from_metadata(license_field="UNKNOWN", classifiers=["License :: OSI Approved :: MIT License"]) == "MIT"
    )
    # A generic name gives way to a specific one from the other field.
    assert (
        license_from_metadata(
            license_field="GPL",
            classifiers=["License :: OSI Approved :: GNU General Public License v3 or later (GPLv3+)"],
        )
        == "GPL-3.0-or-later"
    )
    assert license_from_metadata(license_field=APACHE_NOTICE * 2) == "Apache-2.0"
    assert license_from_metadata(license_field="Dual: see the file") == "Dual: see the file"
    assert license_from_metadata() is None


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        ("MIT", "permissive"),
        ("BSD-3-Clause", "permissive"),
        ("Apache-2.0", "permissive"),
        ("ISC", "permissive"),
        ("PSF-2.0", "permissive"),
        ("Unlicense", "permissive"),
        ("0BSD", "permissive"),
        ("Zlib", "permissive"),
        ("MIT-0", "permissive"),
        ("CC0-1.0", "permissive"),
        ("BSD", "permissive"),
        ("GPL-3.0-or-later", "copyleft"),
        ("LGPL-2.1", "copyleft"),
        ("AGPL-3.0", "copyleft"),
        ("MPL-2.0", "copyleft"),
        ("EPL-2.0", "copyleft"),
        (PROPRIETARY, "proprietary"),
        ("Some custom terms", "unknown"),
        (None, "unknown"),
        ("MIT OR GPL-3.0", "permissive"),
        ("MIT AND GPL-3.0", "copyleft"),
        ("(MIT OR Apache-2.0) AND GPL-2.0", "copyleft"),
        ("MIT AND (GPL-2.0 OR Apache-2.0)", "permissive"),
        ("GPL-2.0-or-later WITH Classpath-exception-2.0", "copyleft"),
        ("MIT AND Foo", "unknown"),
        ("MIT AND", "unknown"),
        ("(MIT", "unknown"),
    ],
)
def test_license_kinds(expression: str | None, kind: str) -> None:
    assert license_kind(expression) == kind


def test_license_id_kind_reads_version_ranges() -> None:
    assert license_id_kind("GPL-3.0+") == "copyleft"
    assert license_id_kind("lgpl-3.0-only") == "copyleft"
    assert license_id_kind("LicenseRef-Proprietary-Acme") == "proprietary"


def test_file_and_metadata_agree() -> None:
    found = combine_license_evidence({"LICENSE": "BSD-3-Clause"}, "BSD")
    assert (found.license, found.kind, found.notes) == ("BSD-3-Clause", "permissive", ())
    found = combine_license_evidence({"COPYING": "GPL-3.0"}, "GPL-3.0-or-later")
    assert found.license == "GPL-3.0-or-later"
    found = combine_license_evidence({"LICENSE-MIT": "MIT", "LICENSE-APACHE": "Apache-2.0"}, "MIT OR Apache-2.0")
    assert found.license == "MIT OR Apache-2.0"


def test_a_conflict_goes_by_the_file_and_is_noted() -> None:
    found = combine_license_evidence({"LICENSE": "GPL-3.0"}, "MIT")
    assert (found.license, found.kind) == ("GPL-3.0", "copyleft")
    assert found.notes == ("the metadata says MIT but the license file says GPL-3.0; going by the license file",)


def test_evidence_from_one_side_only() -> None:
    assert combine_license_evidence({}, "MIT") == DetectedLicense("MIT", "permissive")
    several = combine_license_evidence({"LICENSE": "MIT", "COPYING": "GPL-2.0"}, None)
    assert (several.license, several.kind) == ("MIT AND GPL-2.0", "copyleft")
    unknown = combine_license_evidence({"LICENSE": None}, "ISC")
    assert unknown.license == "ISC" and unknown.unrecognised_files == ("LICENSE",)
    assert unknown.notes == ("LICENSE: license text not recognised",)
    assert combine_license_evidence({}, None) == DetectedLicense(None, "unknown")


def test_parse_license_policy() -> None:
    assert parse_license_policy("permissive") == "permissive"
    assert parse_license_policy(" ANY ") == "any"
    assert parse_license_policy("MIT, BSD-3-Clause") == frozenset({"MIT", "BSD-3-Clause"})
    assert parse_license_policy(["GPL-3.0"]) == frozenset({"GPL-3.0"})
    with pytest.raises(ConfigError, match="--licenses needs"):
        parse_license_policy(" , ")


def detected(expression: str | None) -> DetectedLicense:
    return DetectedLicense(expression, license_kind(expression))


def test_the_default_policy_refuses_copyleft_with_a_way_out() -> None:
    check_license("x", detected("MIT"), "permissive")
    with pytest.raises(BuildError) as info:
        check_license("x", detected("GPL-3.0"), "permissive")
    assert str(info.value) == (
        "x is licensed GPL-3.0 (copyleft); gym-repost keeps permissive licenses by "
        "default; pass --licenses any to build it anyway"
    )
    with pytest.raises(BuildError, match="a license gym-repost cannot classify"):
        check_license("x", detected("Some custom terms"), "permissive")
    check_license("x", detected("GPL-3.0"), "any")


def test_a_package_without_a_license_is_refused_with_a_clear_message() -> None:
    with pytest.raises(BuildError) as info:
        check_license("pkg", detected(None), "permissive")
    message = str(info.value)
    assert message.startswith("pkg has no license gym-repost can detect: it has no LICENSE or COPYING file")
    assert "pass --licenses any" in message
    with pytest.raises(BuildError, match=r"its license file \(LICENSE\) matches no license"):
        check_license("pkg", DetectedLicense(None, "unknown", unrecognised_files=("LICENSE",)), "permissive")
    with pytest.raises(BuildError, match="has no license"):
        check_license("pkg", detected(None), frozenset({"MIT"}))
    check_license("pkg", detected(None), "any")


def test_explicit_license_lists() -> None:
    assert license_allowed(detected("GPL-3.0-or-later"), frozenset({"GPL-3.0"}))
    assert license_allowed(detected("MIT OR GPL-3.0"), frozenset({"GPL-3.0"}))
    assert not license_allowed(detected("MIT AND GPL-3.0"), frozenset({"MIT"}))
    assert license_allowed(detected("LGPL-2.1"), frozenset({"permissive", "copyleft"}))
    assert license_allowed(detected("Some custom terms"), frozenset({"some custom terms"}))
    with pytest.raises(
        BuildError,
        match=r"x is licensed Apache-2.0 \(permissive\), which is not among "
        r"--licenses BSD-3-Clause,MIT",
    ):
        check_license("x", detected("Apache-2.0"), frozenset({"MIT", "BSD-3-Clause"}))
