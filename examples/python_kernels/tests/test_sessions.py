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


def test_a_ring_of_another_session_is_refused():
    """The pad is checked like any buffer: one of another team is refused, naming the kernel's parameter."""
    old = custom_kernel.init(backend="emulator", world=2)
    ring = custom_kernel._native.Ring(old._inner)
    session = custom_kernel.init(backend="emulator", world=2)
    try:
        src = session.tensor_arg([rank_data(r, 8) for r in session.local_ranks], "src")[0]
        inbox = ferrocomm.empty(8, "float32")
        with pytest.raises(ferrocomm.ForeignBufferError, match="pad") as e:
            custom_kernel._native.scaled_put(session._inner, ring, src, session.tensor_arg(inbox, "inbox")[0], 1.0, None)
        assert e.value.argument == "pad"
        still_works(session)
    finally:
        ferrocomm.shutdown()
