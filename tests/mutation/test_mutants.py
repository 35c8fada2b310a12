"""Every one-line mutant of tests/mutation/mutants.py is caught by the tests named with it."""

from __future__ import annotations

import pytest

from tests.mutation.mutants import MUTANTS, run


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name.split(":")[0] + f"-{i}" for i, m in enumerate(MUTANTS)])
def test_the_mutant_is_caught(mutant):
    caught, detail = run(mutant)
    assert caught, f"mutant survived ({mutant.name}): {detail}"
