"""The Ray side of an engine pool: join (or start) a cluster, check it can hold the replicas, reserve them.

Each check fails early with one message that names the problem, what was asked, what exists and the
fix, instead of Ray's own behaviour: an unreachable address makes `ray.init` retry for minutes, and
an actor that asks for more than the cluster has waits for ever.
"""

from __future__ import annotations

import logging
import math
import os
import socket

__all__ = ["connect", "check_resources", "reserve"]

PROBE_SECONDS = 5.0
"""How long a TCP connection to a cluster's address may take before it counts as unreachable."""


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of "host:port" or "ray://host:port"; None for "auto"/"local" (no address to probe)."""
    if address in ("auto", "local"):
        return None
    bare = address.split("://", 1)[-1]
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address must be 'host:port' (the head node's GCS port, 6379 by default), 'ray://host:port', "
                         f"'auto' or None; got {address!r}")
    return host, int(port)


def _resolved(target: tuple[str, int]) -> tuple[str, int]:
    try:
        return socket.gethostbyname(target[0]), target[1]
    except OSError:
        return target


def _probe(address: str) -> None:
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=PROBE_SECONDS).close()
    except OSError as error:
        raise ConnectionError(
            f"no Ray cluster reachable at {address!r} ({error}). Start one with `ray start --head --port "
            f"{target[1]}` on the head node (and `ray start --address <head>:{target[1]}` on each other node), "
            "check the address and the firewall, or pass address=None for a local Ray instance") from None


def connect(address: str | None) -> bool:
    """Join the Ray cluster at `address` ("host:port", "auto", or None: $RAY_ADDRESS, else a new local
    instance); returns True when this call started Ray (the caller then shuts it down)."""
    import ray

    if address:
        _probe(address)
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        target = _host_port(address) if address else None
        if target is not None and not address.startswith("ray://") and _resolved(target) != _resolved(
                _host_port(current)):
            raise ValueError(f"this process is already connected to the Ray cluster at {current!r}, not {address!r}: "
                             "pass address=None to use it, or ray.shutdown() first")
        return False
    if not address and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
        _probe(address)
    verbose = logging.getLogger().isEnabledFor(logging.INFO)  # planner.logs.configure_logging's choice (importing
    # ray resets ray's own logger, so that one cannot tell): the replicas' output is shown only when verbose
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=verbose,
                 logging_level=logging.INFO if verbose else logging.WARNING)
    except ConnectionError as error:
        raise ConnectionError(f"no Ray cluster reachable at {address!r}: {error}. Start one with "
                              "`ray start --head`, or pass address=None for a local Ray instance") from None
    return True


def check_resources(replicas: int, cpus: float, gpus: float) -> None:
    """Raise when the cluster as a whole has too few CPUs or GPUs for `replicas` replicas."""
    import ray

    total = ray.cluster_resources()
    for name, each, field in (("CPU", cpus, "cpus_per_replica"), ("GPU", gpus, "gpus_per_replica")):
        have = total.get(name, 0.0)
        if each > 0 and replicas * each > have + 1e-9:
            fits = math.floor(have / each + 1e-9)
            raise ValueError(f"{replicas} engine replicas x {each:g} {name}s each need {replicas * each:g} {name}s, but "
                             f"the Ray cluster has {have:g}: use at most {fits} replicas, fewer {name}s per replica "
                             f"({field}), or add nodes (`ray start --address <head>:6379` on each)")


def reserve(replicas: int, cpus: float, gpus: float, strategy: str, timeout_s: float):
    """A placement group of one bundle per replica ({CPU, GPU}), ready; raises when the free resources
    do not appear within `timeout_s` (other actors hold them, or no node fits one bundle)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = {"CPU": cpus} | ({"GPU": gpus} if gpus > 0 else {})
    group = placement_group([dict(bundle) for _ in range(replicas)], strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(f"waited {timeout_s:g} s for {replicas} bundles of {bundle} ({strategy}) for the engine "
                           f"replicas; free now: {ray.available_resources()}. Other actors hold the rest, or no node "
                           "has one bundle's worth: stop them, ask for less per replica, or add nodes")
    return group
