"""The official Kubernetes Python client against a running skiff server.

Usage: client_test.py KUBECONFIG

Lists ConfigMaps, watches from the list's resourceVersion and receives the events of a create,
an update and a delete; then waits for the store to compact the list's revision and checks that
a watch (and an exact list) from it fails with 410 Gone. Exits non-zero on any failure.
"""
import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
ns = "default"

# Every field of version.Info decodes.
info = client.VersionApi().get_code()
assert info.major == "1" and info.minor == "33", info

listed = v1.list_namespaced_config_map(ns)
rv = listed.metadata.resource_version
print("listed at resourceVersion", rv)

events = []
done = threading.Event()


def watcher():
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=20):
        events.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("k")))
        if ev["type"] == "DELETED":
            w.stop()
    done.set()


t = threading.Thread(target=watcher, daemon=True)
t.start()
time.sleep(0.5)
body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py1"), data={"k": "one"})
v1.create_namespaced_config_map(ns, body)
v1.patch_namespaced_config_map("py1", ns, {"data": {"k": "two"}})
v1.delete_namespaced_config_map("py1", ns)
assert done.wait(30), f"watch did not see the delete: {events}"
assert [e[0] for e in events] == ["ADDED", "MODIFIED", "DELETED"], events
assert events[1][2] == "two", events
print("watch events:", events)

# Wait until the store compacts past rv (the server runs with a short compaction interval).
deadline = time.time() + 60
while True:
    v1.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="tick-")))
    try:
        v1.list_namespaced_config_map(ns, resource_version=rv, resource_version_match="Exact")
    except ApiException as e:
        assert e.status == 410, e
        break
    assert time.time() < deadline, "revision never compacted"
    time.sleep(0.5)
print("list at a compacted revision: 410")

try:
    for ev in watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=10):
        raise AssertionError(f"unexpected event from a compacted revision: {ev['type']}")
    raise AssertionError("watch from a compacted revision ended without an error")
except ApiException as e:
    assert e.status == 410, e
print("watch from a compacted revision: 410")
print("python client: all checks passed")
