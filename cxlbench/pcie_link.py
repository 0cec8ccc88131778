"""A PCIe device's link as sysfs shows it: the generation and width it runs at now, and
the most it can. A GPU drops its link to Gen1 when idle, so the link a copy ran over is
read while the copy runs (watch), not before or after."""
from __future__ import annotations

import threading
from pathlib import Path

# GT/s a lane -> PCIe generation.
GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


def address(domain: int, bus: int, device: int, function: int = 0) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def generation(speed: str) -> int | None:
    """sysfs's "32.0 GT/s PCIe" (or "32 GT/s") as 5; None where not a known speed."""
    try:
        return GENERATIONS.get(float(speed.split()[0]))
    except (ValueError, IndexError):
        return None


def read(addr: str, sysfs: str | Path = "/sys") -> dict | None:
    """{"gen", "width", "max_gen", "max_width"} of the device at addr, None where sysfs
    has no such device (a VM's passthrough without a link, another OS)."""
    folder = Path(sysfs) / "bus/pci/devices" / addr
    try:
        text = {name: (folder / name).read_text().strip() for name in
                ("current_link_speed", "current_link_width", "max_link_speed",
                 "max_link_width")}
        return {"gen": generation(text["current_link_speed"]),
                "width": int(text["current_link_width"]),
                "max_gen": generation(text["max_link_speed"]),
                "max_width": int(text["max_link_width"])}
    except (OSError, ValueError):
        return None


def lane_rate(gen: int | None) -> float:
    """GT/s a lane of generation gen (0 where unknown): generations double, so a link's
    rate is this times its width, not gen x width."""
    return next((rate for rate, g in GENERATIONS.items() if g == gen), 0.0)


def label(gen: int | None, width: int | None) -> str:
    return f"gen{gen if gen else '?'} x{width if width else '?'}"


class Watch:
    """The link read every `every` seconds on a thread of its own while the block runs
    (the GPU library's calls release the GIL); `highest` the fastest seen, with the most
    the link can, as {"during": "gen5 x16", "max": "gen5 x16"}; None where unreadable."""

    def __init__(self, addr: str, sysfs: str | Path = "/sys", every: float = 0.02):
        self.addr, self.sysfs, self.every = addr, sysfs, every
        self.seen: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            link = read(self.addr, self.sysfs)
            if link is None:
                return
            self.seen.append(link)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        last = read(self.addr, self.sysfs)      # at once after the work: a short copy's
        if last is not None:                    # link may not have been sampled during it
            self.seen.append(last)

    @property
    def highest(self) -> dict | None:
        if not self.seen:
            return None
        top = max(self.seen, key=lambda s: lane_rate(s["gen"]) * (s["width"] or 0))
        return {"during": label(top["gen"], top["width"]),
                "max": label(top["max_gen"], top["max_width"])}
