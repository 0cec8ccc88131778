#!/bin/busybox sh
# The guest's init: load the modules, make the host's root a writable overlay, share the
# working directory and the exchange folder, run the host-written guest.sh, power off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod "/modules/$m" 2>/dev/null; done
opts=trans=virtio,version=9p2000.L,msize=262144
mkdir -p /host /xchg /rw /newroot
mount -t 9p -o "$opts,ro" hostroot /host
mount -t 9p -o "$opts" xchg /xchg
mount -t tmpfs -o size=256m tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /newroot
# /tmp stays the host's, under the overlay: checkouts and venvs may live there.
for fs in proc sys dev run; do mkdir -p "/newroot/$fs"; done
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mount -t tmpfs tmpfs /newroot/run
work=$(cat /xchg/workdir)
mkdir -p "/newroot$work" /newroot/.xchg
mount -t 9p -o "$opts" work "/newroot$work"
mount --bind /xchg /newroot/.xchg
echo "cxlbench-guest: running guest.sh"
chroot /newroot /bin/sh /.xchg/guest.sh > /xchg/guest.log 2>&1
echo "cxlbench-guest: guest.sh exited $?"
sync
poweroff -f
