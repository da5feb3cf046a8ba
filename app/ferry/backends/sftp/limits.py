"""Sizes, depths and counts for SFTP over paramiko, each measured (figures beside it).

The role modules read these as ``limits.NAME`` when they run, never copy them at import, so a
test can change one for the whole package with ``monkeypatch.setattr(limits, NAME, value)``.
"""

from __future__ import annotations

from ferry.core.errors import UsageError

WINDOW = 64 << 20
# Largest SSH packet the server may send on an SFTP channel (paramiko's default is 32 KiB).
# sshd fills a packet with whatever it has buffered for the channel, so when it runs behind
# (parallel range streams) a download arrives in a third to a sixth as many packets, each
# costing paramiko the same Python work however big (measured 8,200 -> 1,400-3,700 packets per
# 256 MiB). Kept well under OpenSSH's 256 KiB packet limit.
MAX_PACKET = 128 << 10
REQUEST = 255 << 10  # OpenSSH's sftp-server takes reads/writes up to 256 KiB messages
PORTABLE_REQUEST = 32 << 10  # SFTP's portable maximum, until the server is known to be OpenSSH
SLOT_WAIT = 120.0  # seconds to wait for a free channel before handing the file back to the queue
READ_DEPTH = 16
PARALLEL_MIN = 64 << 20  # files this big are read as parallel byte-range streams
# Verifying an upload: files up to READBACK_MAX are read back over SFTP (one more round trip, no
# process on the server); bigger ones are hashed by the server, in the shared batched shell
# (remote_hash.HashBatcher) after they close, or from FOLLOW_MIN on by a hash that follows the
# upload as it goes. Reading 1 MiB files back doubled paramiko's work per file: 100 x 1 MiB up
# with --parallel 4 took 2.23 s verified by read-back, 2.03 s by the batched hash, 1.44 s
# unverified (client CPU 1.4 / 0.9 / 0.8 s; medians of 5, load ~5). A follower costs an exec
# channel per file, worth it only where hashing after the last byte would take a while.
READBACK_MAX = 64 << 10
FOLLOW_MIN = 16 << 20
# Streams per big download. Each stream's replies are parsed on its own thread under the one
# GIL, with the transport thread decrypting for all of them: on 2 cores, 4 streams held the GIL
# ~1.0 s per 256 MiB, 2 streams ~0.8 s, 1 stream ~0.6 s; interleaved `ferry cp` runs (5 each,
# load 12) gave 2 streams 5.11 s against 4 streams' 5.62 s, client CPU 1.8 against 2.1 s. Two
# keep 8 MiB in flight for a long network link. (More read-ahead per stream makes paramiko copy
# its growing buffer on every read.)
PARALLEL_STREAMS = 2
# Streams per big upload (PARALLEL_MIN and more; parallel_write). Each SFTP channel has its
# own sftp-server process and its own 2 MiB window from sshd, so the server's work overlaps.
# Interleaved `ferry cp` uploads, 2 cores at load 8-10: 2 GiB (3 runs) 1 stream 8.38 s, 2 streams
# 7.63 s, 4 streams 6.59 s; 256 MiB (5 runs) 1.63 / 1.73 / 3 streams 1.56 / 1.45 s; the same
# client CPU (4.2 s per 2 GiB) whatever the count.
UPLOAD_STREAMS = 4
# The stream count for both directions, for every host ("2"), else a saved site's ``streams``
# option, else the defaults above. Extra streams only ever take channels that are free.
STREAMS_ENV = "FERRY_SFTP_STREAMS"
MAX_STREAMS = 8
WRITE_DEPTH = 64  # WRITE requests in flight before the writer waits for the oldest reply
# Uploads of this size and more send from a thread of their own (writer.Sender): the copy loop
# hashes the next chunk (hashlib lets go of the GIL) while the previous one is encrypted and
# sent, so the stream hash (sha256 ~0.2-0.3 s of CPU per 256 MiB here) no longer adds to the
# upload's time on a machine with a core to spare. SEND_AHEAD bounds the bytes waiting for it.
SEND_THREAD_MIN = 16 << 20
SEND_AHEAD = 8 << 20
# Extra TCP connections ("lanes", each its own paramiko Transport and login) for one big file on a
# long link: one TCP connection moves at most its window per round trip (6 MiB / 150 ms = 42 MB/s,
# measured through benchmarks/linkemu.py: Ferry's peak in flight was the whole 6 MiB window at 50
# and 150 ms). Connections per file follow the bandwidth-delay product: enough that together
# they could carry LANE_RATE, the most one file moves through Ferry on this 2-core machine
# (loopback: 2 GiB down 7.93 s = 271 MB/s, up 9.39 s = 229 MB/s), at the measured RTT.
LANE_RATE = 250e6
MAX_CONNECTIONS = 4
# The window assumed per connection: the local TCP buffer maximum (net.ipv4.tcp_rmem down,
# tcp_wmem up), at most REMOTE_WINDOW, Linux's default tcp_rmem maximum, as the far end's
# buffers (which the client cannot see) are most likely that.
REMOTE_WINDOW = 6 << 20
# Round trips a new connection costs before it moves a byte (TCP, version exchange, key
# exchange, new keys, auth, channel open, SFTP init; 8-9 measured at 50 ms): a lane is opened
# only where the time it saves on this file is larger than that.
LOGIN_RTTS = 10
CONNECTIONS_ENV = "FERRY_SFTP_CONNECTIONS"  # a fixed count (1 turns lanes off), else by the BDP


def stream_count(raw: str, where: str) -> int:
    """A configured stream count: a whole number from 1 to MAX_STREAMS."""
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_STREAMS:
        raise UsageError(f"{where} must be a whole number from 1 to {MAX_STREAMS}, not {raw!r}")
    return int(raw)
