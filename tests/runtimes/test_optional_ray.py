"""Ray is optional: specpar never imports it until a Ray runtime is made, and says how to install it if missing."""

import sys

import pytest

from conftest import make_pair
from processes import run_python
from specpar import ConfigError, generate

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)


def test_importing_specpar_and_its_runtimes_does_not_import_ray():
    code = "import sys, specpar, specpar.runtimes, specpar.entrypoints.cli; assert 'ray' not in sys.modules, 'ray imported'"
    done = run_python(code, 60)
    assert done.returncode == 0, done.stderr


def test_without_ray_the_ray_runtime_is_a_one_line_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    target, drafter = make_pair()
    with pytest.raises(ConfigError, match=r"pip install 'specpar\[ray\]'"):
        generate([1], target, drafter, max_tokens=2, runtime="ray")


@pytest.mark.parametrize("address,match", [("127.0.0.1:1", "nothing answers at 127.0.0.1:1"), ("head", "HOST:PORT")])
def test_a_ray_address_where_nothing_answers_is_refused_at_once(address, match):
    from specpar.runtimes.ray_cluster import check_reachable

    with pytest.raises(ConfigError, match=match):
        check_reachable(address, timeout_s=2.0)
