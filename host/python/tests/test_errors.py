"""Bad input raises at once, with its own exception class, naming the argument; nothing is lost: the
session keeps working afterwards and the caller's arrays are untouched."""

import numpy as np
import pytest

import ferrocomm
from conftest import rank_data


def pair(n, dtype=np.float32):
    return [rank_data(r, n, dtype) for r in range(2)]


def still_works(team):
    x = pair(5)
    expected = np.add.reduce(x)
    team.all_reduce(x)
    np.testing.assert_array_equal(x[0], expected)


def test_wrong_dtype(team):
    x = pair(4, np.float64)
    with pytest.raises(ferrocomm.RequirementError, match="float64") as e:
        team.all_reduce(x)
    assert e.value.argument == "tensor"
    np.testing.assert_array_equal(x[0], rank_data(0, 4, np.float64))
    still_works(team)


def test_non_contiguous(team):
    x = [np.zeros(8, np.float32)[::2] for _ in range(2)]
    with pytest.raises(ferrocomm.RequirementError, match="contiguous"):
        team.all_reduce(x)
    still_works(team)


def test_one_array_for_two_local_ranks(team):
    with pytest.raises(ferrocomm.RequirementError, match="one tensor per rank"):
        team.all_reduce(np.zeros(4, np.float32))


def test_local_ranks_disagree_on_size(team):
    with pytest.raises(ferrocomm.RequirementError, match="differ"):
        team.all_reduce([np.zeros(4, np.float32), np.zeros(5, np.float32)])


def test_mixed_dtypes_between_arguments(team):
    out = [np.zeros(8, np.float16) for _ in range(2)]
    with pytest.raises(ferrocomm.RequirementError, match="float16"):
        team.all_gather_into_tensor(out, pair(4))


def test_output_of_the_wrong_size(team):
    out = [np.zeros(7, np.float32) for _ in range(2)]
    with pytest.raises(ferrocomm.RequirementError, match="needs 8") as e:
        team.all_gather_into_tensor(out, pair(4))
    assert e.value.argument == "output"
    still_works(team)


def test_all_to_all_that_does_not_split(team):
    with pytest.raises(ferrocomm.RequirementError, match="equal chunks"):
        team.all_to_all_single(pair(5), pair(5))


def test_unknown_op(team):
    with pytest.raises(ferrocomm.RequirementError, match="not one of") as e:
        team.all_reduce(pair(4), "avg")
    assert e.value.argument == "op"


def test_broadcast_root_out_of_range(team):
    with pytest.raises(ferrocomm.RequirementError, match="root 5"):
        team.broadcast(pair(4), 5)
    still_works(team)


def test_larger_than_the_staging_buffer(team):
    n = team.staging_bytes // 4 + 1
    with pytest.raises(ferrocomm.RequirementError, match="ferrocomm.empty"):
        team.all_reduce(pair(n))
    still_works(team)


def test_bad_shape(team):
    with pytest.raises(ferrocomm.RequirementError, match="negative"):
        team.empty((-1, 4))


def test_bad_dtype_for_memory(team):
    with pytest.raises(ferrocomm.RequirementError, match="int32"):
        team.empty(4, "int32")


def test_errors_are_ferrocomm_errors_and_builtin_ones():
    assert issubclass(ferrocomm.RequirementError, ValueError)
    assert issubclass(ferrocomm.DeviceTimeoutError, TimeoutError)
    for name in ferrocomm.errors.__all__:
        assert issubclass(getattr(ferrocomm, name), ferrocomm.FerrocommError)


def test_no_session():
    ferrocomm.shutdown()
    with pytest.raises(ferrocomm.ConfigError, match="init"):
        ferrocomm.all_reduce(pair(2))
