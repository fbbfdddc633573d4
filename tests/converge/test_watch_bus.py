"""Units watched over a real D-Bus daemon (dbus-daemon, a bus of the test's
own, named as the system bus), where a stand-in for systemd's manager owns
org.freedesktop.systemd1: it answers Subscribe and sends a unit's
PropertiesChanged as systemd does.  No systemd runs here; the bus, the
messages and the Watcher's side are the real thing.  Then the bus goes away."""

import os
import shutil
import subprocess
import threading

import hy  # noqa: F401
import pytest
from jeepney import DBusAddress, MessageType, new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

from consfig.converge.watch import Watcher, unit_object_path


@pytest.fixture
def bus(tmp_path, monkeypatch):
    if not shutil.which("dbus-daemon"):
        if os.environ.get("CI") == "true":
            raise RuntimeError("dbus-daemon is needed (package dbus-daemon or dbus)")
        pytest.skip("dbus-daemon is not installed")
    address = f"unix:path={tmp_path}/bus"
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--nopidfile",
                               f"--address={address}", "--print-address"],
                              stdout=subprocess.PIPE, text=True)
    daemon.stdout.readline()  # it listens once it says where
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", address)
    yield daemon, address
    if daemon.poll() is None:
        daemon.kill()
    daemon.wait(10)


class Manager:
    """Owns org.freedesktop.systemd1 on the bus and answers its method calls."""

    def __init__(self, address):
        self.conn = open_dbus_connection(address)
        self.conn.send_and_get_reply(message_bus.RequestName("org.freedesktop.systemd1"),
                                     timeout=5)
        self.subscribed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                msg = self.conn.receive()
            except OSError:
                return
            if msg.header.message_type == MessageType.method_call:
                self.conn.send(new_method_return(msg))
                if msg.header.fields.get(3) == "Subscribe":
                    self.subscribed.set()

    def changed(self, unit):
        emitter = DBusAddress(unit_object_path(unit), interface="org.freedesktop.DBus.Properties")
        self.conn.send(new_signal(emitter, "PropertiesChanged", "sa{sv}as",
                                  ("org.freedesktop.systemd1.Unit",
                                   {"ActiveState": ("s", "inactive")}, [])))


def keys_within(w, key, seconds):
    import time
    deadline = time.monotonic() + seconds
    seen = set()
    while key not in seen and time.monotonic() < deadline:
        seen |= w.wait(deadline - time.monotonic())
    return seen


def test_a_units_state_change_signalled_on_the_bus_wakes_its_key(bus):
    daemon, address = bus
    manager = Manager(address)
    with Watcher() as w:
        w.add("nginx", [["unit", "nginx.service"]])
        w.add("ssh", [["unit", "ssh.service"]])
        assert manager.subscribed.is_set(), "the watcher subscribed to systemd's signals"
        assert not w._no_bus, "it watches over the bus"
        manager.changed("nginx.service")
        seen = keys_within(w, "nginx", 5)
        assert seen == {"nginx"}, f"that unit's key only: {seen}"


def test_the_bus_going_away_falls_back_to_polling_and_drifts_every_unit(bus):
    daemon, address = bus
    Manager(address)
    with Watcher(unit_poll=0.2) as w:
        w.add("nginx", [["unit", "nginx.service"]])
        daemon.kill()
        daemon.wait(10)
        seen = keys_within(w, "nginx", 5)
        assert seen == {"nginx"}, f"every unit checked again: {seen}"
        assert w._no_bus, "polling from now on"
        assert w.wait(0.5) == set(), "a unit whose state stays the same drifts nothing"
