"""Memory shared by two hosts (benchmarks/crosshost.py): the flag's round trip with and
without the software-coherence protocol, the ring's bandwidth by message size, and the
messages a ring read stale or torn, and additions to one counter (their time, and those
lost), and the bandwidth each host of a pool keeps beside the other."""
from __future__ import annotations

from ...units import format_size
from .draw import bars, lines


def shared_pingpong(frame, runs):
    yield bars(frame, ("protocol", "flush"), "round_trip", key="shared-pingpong",
               family="shared_pingpong",
               title="A flag's round trip between two hosts on one region",
               measured="Round trip (ns) of a flag handed from host 0 to host 1 and back, "
                        "without the protocol or with the writer's flush and fence and the "
                        "reader's clflush before each poll")


def shared_ring(frame, runs):
    timed = frame[~frame["params"].map(lambda p: bool(p.get("simulate")))]
    yield lines(timed, "message", "bandwidth", xlabel="message size", xsize=True, logx=True,
                key="shared-ring", family="shared_ring",
                title="A ring's bandwidth between two hosts, by message size",
                measured="Bandwidth (GB/s) at the consumer of messages streamed from host 0 "
                         "to host 1 through a single-producer single-consumer ring, every "
                         "message's sequence number and checksum read back")
    # Stale counts where any can be: a simulated ring, or one that read any (a coherent
    # ring reads none, and a bar of zeros a case says nothing the table does not).
    judged = frame[frame["params"].map(lambda p: bool(p.get("simulate"))) |
                   ((frame["metric"] == "stale") & (frame["median"] > 0))]
    if len(judged):
        yield bars(frame[frame["case"].isin(set(judged["case"]))], ("protocol", "message"),
                   "stale", key="shared-stale", family="shared_ring",
                   title="Messages the ring read stale",
                   measured="Messages (of each repetition's) the consumer read with an "
                            "older sequence number; simulated rings see the messages through "
                            "a private copy only the protocol moves, the worst a "
                            "non-coherent device can do")


def shared_atomic(frame, runs):
    yield bars(frame, ("op",), "addition", key="shared-atomic", family="shared_atomic",
               title="An addition to a counter both hosts add to",
               measured="Time (ns) of one addition by each host to one counter on the "
                        "region: lock xadd, a compare-and-swap loop, or a plain load and "
                        "store, without the protocol or bracketed by the reader's and the "
                        "writer's flushes")
    # Lost additions where any were lost: a plain add always can; an atomic one only
    # where the device keeps no coherence across hosts.
    lost = frame[(frame["metric"] == "lost") & (frame["median"] > 0)]
    if len(lost):
        yield bars(frame[frame["case"].isin(set(lost["case"]))], ("op",), "lost",
                   key="shared-lost", family="shared_atomic",
                   title="Additions lost when both hosts add to one counter",
                   measured="Additions missing from the counter once both hosts finished "
                            "(of 2 x iterations made): a read-modify-write that another "
                            "host's overwrote")


def shared_pool(frame, runs):
    # The slice each case read (slice=0 leaves it to cxlbench: the case's info says).
    slices = sorted({int(i["slice"]) for i in frame["info"]
                     if isinstance(i, dict) and i.get("slice")})
    read = f"its own slice of {' or '.join(format_size(b) for b in slices)}" if slices \
        else "its own slice"
    yield bars(frame, (), "kept", key="shared-pool", family="shared_pool",
               title="Bandwidth a host keeps beside the other (a pool's noisy neighbour)",
               measured=f"Share (%) of a host's read bandwidth on {read} of the region kept "
                        "while the other host reads its own at the same time, against the "
                        "host reading alone")


PLOTTERS = {"shared_pingpong": shared_pingpong, "shared_ring": shared_ring,
            "shared_atomic": shared_atomic, "shared_pool": shared_pool}
