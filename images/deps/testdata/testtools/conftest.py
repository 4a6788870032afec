import pytest_cov
