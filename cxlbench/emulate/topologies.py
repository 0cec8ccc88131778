"""The emulated machines: each a row of parameters, the QEMU arguments they become, and
the guest commands that bring the far memory online. Sizes and HMAT values are
parameters (`cxlbench emulate --param far=1G ...`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserError
from ..units import format_size, parse_size

# HMAT as QEMU declares it: latency in ns, bandwidth in bytes/s ("5G" = 5 GiB/s, which the
# guest reads back as 5120 MB/s).
COMMON_PARAMS = {"dram": "1536M", "cpus": "2"}
# Parameters that are sizes (bandwidths in bytes/s), each with the unit said when refused;
# the others are whole numbers, with theirs.
SIZES = {"dram": "", "far": "", "local_bandwidth": "/s", "far_bandwidth": "/s"}
INTEGERS = {"cpus": "", "distance": "", "local_latency": " of ns", "far_latency": " of ns"}
MAX_CPUS = 255          # beyond, QEMU 7.2's q35 wants KVM's irqchip and x2APIC
HMAT_ENTRY = 65534      # the largest entry of QEMU's HMAT tables (16 bits, 0xFFFF not a value)


@dataclass(frozen=True)
class EmuTopology:
    name: str
    description: str
    params: dict                          # defaults; values as users type them
    cxl_devices: int = 0                  # type-3 devices; 0: an HMAT node instead
    hosts: int = 1                        # guests; 2: both map one device (shared-cxl)

    def resolve(self, overrides: dict[str, str]) -> dict:
        """The parameters as numbers, every one checked before anything is built or
        booted: a value QEMU or the guest would refuse later is refused here."""
        params = {**COMMON_PARAMS, **self.params}
        for key, value in overrides.items():
            if key not in params:
                raise UserError(f"topology {self.name} has no parameter {key!r} "
                                f"(parameters: {', '.join(params)})")
            params[key] = value
        out = {k: self._number(k, v) for k, v in params.items()}
        if not 1 <= out["cpus"] <= MAX_CPUS:
            raise UserError(f"topology {self.name}: cpus must be 1 to {MAX_CPUS} (QEMU's q35 "
                            f"without an IOMMU gives no more); got {out['cpus']}")
        if out["dram"] < 512 << 20:
            raise UserError(f"topology {self.name}: needs at least 512M of DRAM; got "
                            f"{format_size(out['dram'])}")
        # Each CXL device holds an equal share of the region, in whole 256M blocks.
        step = (256 << 20) * max(1, self.cxl_devices)
        if out["far"] < step or out["far"] % step:
            each = (f"256M on each of its {self.cxl_devices} interleaved devices: "
                    if self.cxl_devices > 1 else "")
            raise UserError(f"topology {self.name}: far must be a multiple of "
                            f"{format_size(step)} ({each}memory blocks online in 256M "
                            f"steps); got {format_size(out['far'])}")
        if "distance" in out and not 11 <= out["distance"] <= 254:
            raise UserError(f"topology {self.name}: distance must be 11 to 254 (10 is a "
                            f"node's own, 255 unreachable); got {out['distance']}")
        for kind in ("latency", "bandwidth"):
            keys = [k for k in (f"local_{kind}", f"far_{kind}") if k in out]
            if keys and (why := _hmat_misfit(kind, [out[k] for k in keys])):
                raise UserError(f"topology {self.name}: "
                                f"{' and '.join(f'{k}={params[k]}' for k in keys)}: {why}")
        return out

    def _number(self, key: str, value) -> int:
        where = f"topology {self.name}: {key}"
        if key in SIZES:
            try:
                n = parse_size(value)
            except ValueError as e:
                raise UserError(f"{where}: {e}") from None
            if n < 1 << 20 or n % (1 << 20):
                raise UserError(f"{where} must be a whole number of MiB{SIZES[key]} (QEMU "
                                f"takes it in M); got {value!r}")
            return n
        text = str(value).strip()
        if isinstance(value, bool) or not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < 1:
            raise UserError(f"{where} must be a whole number{INTEGERS[key]}, at least 1; "
                            f"got {value!r}")
        return int(text)

    def qemu_args(self, p: dict, scratch: str, host: int = 0) -> list[str]:
        if self.cxl_devices:
            return _cxl_args(p, scratch, self.cxl_devices,
                             shared=host if self.hosts > 1 else None)
        return _hmat_args(p)

    def guest_setup(self, p: dict) -> list[str]:
        if not self.cxl_devices:
            return []
        mems = " ".join(f"mem{i}" for i in range(self.cxl_devices))
        if self.hosts > 1:
            # Shared: never system RAM (two kernels would hand out the same pages). A
            # devdax namespace whose page structures live in the guest's own memory (-M
            # mem: with -M dev both kernels would write theirs into the shared bytes).
            return [*self._region(mems),
                    "ndctl create-namespace -f -r region0 -m devdax -M mem -a 4096",
                    "export CXLBENCH_SHARED_REGION=$(ls /dev/dax* | head -n 1)",
                    'test -c "$CXLBENCH_SHARED_REGION"']
        return [*self._region(mems),
                "ndctl create-namespace -f -r region0 -m devdax -a 4096",
                "daxctl reconfigure-device --mode=system-ram dax0.0"]

    def _region(self, mems: str) -> list[str]:
        return [
            # Devices probe asynchronously after the modules load.
            f"for i in $(seq 100); do [ $(cxl list -M | grep -c '\"memdev\"') -ge "
            f"{self.cxl_devices} ] && break; sleep 0.1; done",
            # Let port and decoder probing finish: Linux 6.1 once oopsed in create-region
            # when it came straight after the memdevs appeared.
            "sleep 2",
            f"cxl create-region -m -d decoder0.0 -w {self.cxl_devices} -g 256 -t pmem {mems}",
        ]

    def declared_hmat(self, p: dict) -> dict | None:
        """The HMAT values the guest must read back for the far node, in sysfs units."""
        if self.cxl_devices:
            return None
        return {"read_latency": p["far_latency"], "write_latency": p["far_latency"],
                "read_bandwidth": p["far_bandwidth"] >> 20,
                "write_bandwidth": p["far_bandwidth"] >> 20}


def _hmat_misfit(kind: str, values: list[int]) -> str | None:
    """Why QEMU cannot declare these HMAT values, or None. QEMU 7.2 writes each table as
    16-bit entries of one base unit: the largest power of 10 ns dividing every latency, the
    largest power of 2 bytes/s dividing every bandwidth. It refuses some values that do
    not fit (the first entered decides) and writes others cut to 16 bits."""
    if kind == "latency":
        base = min(10 ** (len(str(v)) - len(str(v).rstrip("0"))) for v in values)
        unit = f"{base} ns"
    else:
        base = min(v & -v for v in values)
        unit = f"{format_size(base)}/s"
    if max(values) // base <= HMAT_ENTRY:
        return None
    return (f"QEMU's HMAT holds them as whole numbers up to {HMAT_ENTRY} of one unit, here "
            f"{unit} (the largest dividing each)")


def _hmat_args(p: dict) -> list[str]:
    total = p["dram"] + p["far"]
    args = ["-machine", "q35,hmat=on", "-m", f"{total >> 20}M",
            "-object", f"memory-backend-ram,id=m0,size={p['dram'] >> 20}M",
            "-object", f"memory-backend-ram,id=m1,size={p['far'] >> 20}M",
            "-numa", f"node,nodeid=0,memdev=m0,cpus=0-{p['cpus'] - 1},initiator=0",
            "-numa", "node,nodeid=1,memdev=m1,initiator=0",
            "-numa", f"dist,src=0,dst=1,val={p['distance']}"]
    for target, lat, bw in ((0, p["local_latency"], p["local_bandwidth"]),
                            (1, p["far_latency"], p["far_bandwidth"])):
        base = f"hmat-lb,initiator=0,target={target},hierarchy=memory"
        args += ["-numa", f"{base},data-type=access-latency,latency={lat}",
                 "-numa", f"{base},data-type=access-bandwidth,bandwidth={bw >> 20}M"]
    return args


def _cxl_args(p: dict, scratch: str, devices: int, shared: int | None = None) -> list[str]:
    """shared: this guest's host number where two guests map one device's memory (the
    file is one, each guest's label area its own)."""
    # An explicit node 0 gives the guest an SRAT; without one Linux runs without NUMA
    # and the CXL window gets no node of its own.
    args = ["-machine", "q35,cxl=on", "-m", f"{p['dram'] >> 20}M",
            "-object", f"memory-backend-ram,id=m0,size={p['dram'] >> 20}M",
            "-numa", f"node,nodeid=0,memdev=m0,cpus=0-{p['cpus'] - 1}",
            "-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1"]
    per_device = p["far"] // devices
    # One more root port than devices: with every port occupied QEMU 7.2 accepted
    # writes and read back zeros (seen with one device and one port).
    for i in range(devices + 1):
        args += ["-device", f"cxl-rp,port={i},bus=cxl.1,id=rp{i},chassis=0,slot={i + 2}"]
    lsa = "" if shared is None else f"-host{shared}"
    for i in range(devices):
        args += ["-object", f"memory-backend-file,id=cxl-mem{i},share=on,"
                            f"mem-path={scratch}/cxl-mem{i}.raw,size={per_device >> 20}M",
                 "-object", f"memory-backend-file,id=cxl-lsa{i},share=on,"
                            f"mem-path={scratch}/cxl-lsa{i}{lsa}.raw,size=256M",
                 "-device", f"cxl-type3,bus=rp{i},memdev=cxl-mem{i},lsa=cxl-lsa{i},"
                            f"id=cxl-pmem{i}"]
    window = max(4 << 30, 1 << (p["far"] - 1).bit_length())
    args += ["-M", f"cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={window >> 30}G"]
    return args


TOPOLOGIES = {t.name: t for t in [
    EmuTopology("hmat", "a CPU-less far-memory node with HMAT latency and bandwidth declared",
                {"far": "512M", "distance": "20", "local_latency": "100",
                 "local_bandwidth": "20G", "far_latency": "300", "far_bandwidth": "5G"}),
    EmuTopology("cxl", "one CXL type-3 device, its region onlined as a CPU-less node (kmem)",
                {"far": "512M"}, cxl_devices=1),
    EmuTopology("cxl-2way", "two CXL type-3 devices, one region interleaved across both",
                {"far": "1G"}, cxl_devices=2),
    EmuTopology("shared-cxl", "two hosts (guests) attached to one CXL type-3 device, its "
                "region a DAX device in each (not onlined), for suites/shared.toml",
                {"far": "256M", "dram": "1G", "cpus": "1"}, cxl_devices=1, hosts=2),
]}


def get(name: str) -> EmuTopology:
    if name not in TOPOLOGIES:
        raise UserError(f"unknown emulated topology {name!r}: choose from "
                        f"{', '.join(TOPOLOGIES)}")
    return TOPOLOGIES[name]
