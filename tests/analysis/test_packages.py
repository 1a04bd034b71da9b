"""Which distribution provides an import name (text only, nothing installed)."""

from __future__ import annotations

import pytest

from gym_repost.analysis.packages import distribution_for


@pytest.mark.parametrize(
    ("module", "distribution"),
    [
        ("odf", "odfpy"),  # tablib's tests import odf: PyPI's "odf" is another project
        ("hamcrest", "PyHamcrest"),  # a corpus suite's assertions
        ("yaml", "PyYAML"),
        ("dateutil", "python-dateutil"),
    ],
)
def test_an_import_name_that_is_not_its_distribution_s_name_maps_to_it(module: str, distribution: str) -> None:
    """Installing the import name installed nothing, or another project, and the tests that
    need it stayed unimportable in every build and audit."""
    assert distribution_for(module) == distribution


def test_an_unknown_import_name_is_its_own_distribution_normalised() -> None:
    assert distribution_for("gym_repost_no_such_module") == "gym-repost-no-such-module"
