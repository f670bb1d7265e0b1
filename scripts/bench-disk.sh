# Sourced by scripts/bench.sh, scripts/bench-pg-statements.sh and scripts/bench-stores.sh: a disk of the bench's own for every file the benches
# write (the daemons' folders with their SQLite stores, spools and outboxes, the PostgreSQL server, the settlement
# store): an ext4 image with a journal, as mkfs.ext4 makes it (a Debian machine's disk), loop-mounted.
#   bench_disk_mount     sets BENCH_DISK (the folder) and BENCH_DISK_KIND (what it is) and exports TMPDIR=$BENCH_DISK
#   bench_disk_unmount   unmounts it and removes the image (call it from the caller's EXIT trap, after bench_postgres_stop)
# Why: the root file system of the machines this is measured on is ext4 without a journal. There the kernel's inode
# allocator reads the inode of each free slot it passes that was freed within the last minute (five more while its
# block is dirty) and skips it (recently_deleted()); a file created after thousands of deletions nearby pays for each.
# The daemons' outbox threads spent 24 to 58 % of their samples there in runs minutes apart (BENCHMARKS.md at 0490c17, the ninth
# look): a cost of whatever this machine deleted before, not of the daemon. Not root, or no loop device: a folder in
# $TMPDIR as it is, and BENCH_DISK_KIND says so.
# The folder's name is short: the PostgreSQL server's and the daemons' unix sockets are made in it (at most 107 bytes).

BENCH_DISK=
BENCH_DISK_IMAGE=
BENCH_DISK_KIND=

bench_disk_mount() {
    local tmp=${TMPDIR:-/tmp}
    BENCH_DISK=$(mktemp -d "$tmp/kbd.XXXXXX")
    # World-writable like /tmp: the PostgreSQL server, run as postgres, makes its folder in it.
    chmod 1777 "$BENCH_DISK"
    local why="not root"
    if [ "$(id -u)" -eq 0 ]; then
        # 16 GiB, sparse, beside the folder: the 1,000,000-row history store and the PostgreSQL server fit; only what
        # is written takes room. noinit_itable: no kernel thread zeroing the inode tables while the bench measures.
        BENCH_DISK_IMAGE=$(mktemp "$tmp/kbd.XXXXXX.img")
        if truncate -s 16G "$BENCH_DISK_IMAGE" && mkfs.ext4 -q -F "$BENCH_DISK_IMAGE" &&
            mount -o loop,noinit_itable "$BENCH_DISK_IMAGE" "$BENCH_DISK"; then
            chmod 1777 "$BENCH_DISK"
            BENCH_DISK_KIND="ext4 with a journal, loop-mounted ($(losetup -j "$BENCH_DISK_IMAGE" | cut -d: -f1), its image on $(df --output=source "$BENCH_DISK_IMAGE" | tail -1))"
        else
            rm -f "$BENCH_DISK_IMAGE"
            BENCH_DISK_IMAGE=
            why="the image could not be made or mounted (above)"
        fi
    fi
    [ -n "$BENCH_DISK_IMAGE" ] ||
        BENCH_DISK_KIND="$tmp as it is ($(df --output=source "$tmp" | tail -1), $(findmnt -no FSTYPE -T "$tmp")): not loop-mounted, $why"
    export TMPDIR=$BENCH_DISK
}

bench_disk_unmount() {
    [ -n "$BENCH_DISK" ] || return 0
    if [ -n "$BENCH_DISK_IMAGE" ]; then
        umount "$BENCH_DISK" || umount -l "$BENCH_DISK" || true
        rm -f "$BENCH_DISK_IMAGE"
        rmdir "$BENCH_DISK" || true
    else
        rm -rf "$BENCH_DISK"
    fi
}
