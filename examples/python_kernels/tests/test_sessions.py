"""Sessions that are not the one custom_kernel.init() made: each test makes its own and closes it."""

import pytest

import custom_kernel
import ferrocomm
from conftest import rank_data, still_works


def test_symmetric_memory_of_another_session_is_refused():
    """A tensor of one session is not symmetric memory of the next (its team is gone): refused, not used."""
    custom_kernel.init(backend="emulator", world=2)
    old = ferrocomm.empty(8, "float32")
    session = custom_kernel.init(backend="emulator", world=2)
    try:
        with pytest.raises(ferrocomm.SymmetricRequiredError, match="inbox"):
            custom_kernel.scaled_put([rank_data(r, 8) for r in session.local_ranks], old)
        still_works(session)
    finally:
        ferrocomm.shutdown()
    del old


def test_a_session_without_the_extension_is_a_config_error():
    ferrocomm.init(backend="emulator", world=2)
    try:
        with pytest.raises(ferrocomm.ConfigError, match="custom_kernel.init"):
            custom_kernel.scaled_put([rank_data(r, 4) for r in range(2)], ferrocomm.empty(4, "float32"))
    finally:
        ferrocomm.shutdown()
