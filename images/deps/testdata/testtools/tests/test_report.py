import pytest
import pytest_mock
def test_nothing():
    pass
