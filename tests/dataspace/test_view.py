"""consfig.apply.dataspace.View: the records an agent's watch keeps, read
without asking etcd (no etcd here: events as the watch gives them)."""

import hy  # noqa: F401

from consfig.apply.dataspace import View

P = "/s/hosts/"


def kv(key, value=b"v", lease=0, create=1):
    return {"key": key, "value": value, "lease": lease, "create_revision": create}


def put(key, revision, value=b"v"):
    # As the watch gives it: a PUT has no "type" (etcd's JSON leaves out a
    # field at its default), its key is text, its value bytes.
    return {"kv": {"key": key, "value": value, "mod_revision": str(revision),
                   "create_revision": str(revision), "lease": "7"}}


def delete(key, revision):
    return {"type": "DELETE", "kv": {"key": key, "mod_revision": str(revision)}}


def test_a_view_is_not_live_before_its_snapshot():
    assert View().read(P) is None


def test_a_view_reads_its_snapshot_sorted_by_key_at_its_revision():
    v = View()
    v.reset(10, [kv(P + "b"), kv(P + "a")])
    revision, kvs = v.read(P)
    assert revision == 10 and [k["key"] for k in kvs] == [P + "a", P + "b"], (revision, kvs)


def test_a_put_after_the_snapshot_adds_the_record_with_its_lease():
    v = View()
    v.reset(10, [])
    v.apply(put(P + "a", 11, b"x"))
    revision, [got] = v.read(P)
    assert revision == 11 and got == {"key": P + "a", "value": b"x", "lease": 7,
                                      "create_revision": 11}, got


def test_a_delete_after_the_snapshot_removes_the_record():
    v = View()
    v.reset(10, [kv(P + "a")])
    v.apply(delete(P + "a", 11))
    assert v.read(P) == (11, []), v.read(P)


def test_an_event_the_snapshot_already_holds_changes_nothing():
    # From the watch before a restart, delivered after the new snapshot.
    v = View()
    v.reset(10, [kv(P + "a")])
    v.apply(delete(P + "a", 10))
    v.apply(put(P + "b", 9))
    assert [k["key"] for k in v.read(P)[1]] == [P + "a"], v.read(P)


def test_every_delete_of_one_revision_applies():
    # A lease that runs out deletes all its keys at one revision.
    v = View()
    v.reset(10, [kv(P + "a"), kv(P + "b"), kv(P + "c")])
    v.apply(delete(P + "a", 11))
    v.apply(delete(P + "b", 11))
    assert [k["key"] for k in v.read(P)[1]] == [P + "c"], v.read(P)


def test_an_invalidated_view_is_not_live_and_ignores_events():
    v = View()
    v.reset(10, [kv(P + "a")])
    v.invalidate()
    v.apply(put(P + "b", 11))
    assert v.read(P) is None


def test_a_view_reads_only_under_the_prefix_asked():
    v = View()
    v.reset(10, [kv(P + "h1/x"), kv(P + "h2/y")])
    assert [k["key"] for k in v.read(P + "h2/")[1]] == [P + "h2/y"], v.read(P + "h2/")
