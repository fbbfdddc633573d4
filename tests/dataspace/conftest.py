import pytest

from etcdlab import EtcdCluster


@pytest.fixture
def etcd(tmp_path):
    """A one-member etcd on a loopback port, in a temporary directory."""
    with EtcdCluster(tmp_path / "etcd", members=1) as cluster:
        yield cluster
