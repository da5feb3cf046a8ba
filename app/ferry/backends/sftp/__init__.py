"""SSH hosts over SFTP (``sftp://``), through paramiko.

Modules by role, imported one way (each uses only those listed before it; ``backend`` uses the
rest and none of them imports it):

- ``limits``: sizes, depths and stream counts, each measured;
- ``paramiko_adapter``: every use of paramiko's internals (pipelined SFTP requests, the SSH fast
  path that ``FERRY_SSH_FASTPATH=0`` turns off, the rekey guard), pinned and contract-tested;
- ``errors``: paramiko's and the socket's exceptions as Ferry's errors;
- ``auth``: host keys against known_hosts, and the login (agent, keys, keyboard-interactive, password);
- ``connection``: one SSH connection per host (:class:`Connection`) and the channels on it
  (:class:`ChannelPool`, bounded by the server's MaxSessions);
- ``remote_hash``: checksums of many files in one exec, and a hash that follows an upload;
- ``shell``: commands on the host (exec channels, a long-lived ``sh``) and its checksum tools;
- ``names``: answers about remote names without a round trip;
- ``host``: :class:`Host`, one per host per process, made of the parts above;
- ``protocol``: SFTP requests pipelined, paths as the server's exact bytes;
- ``parallel_read``, ``parallel_write``: one big file as byte ranges over several channels;
- ``reader``, ``writer``: a remote file read, and written under a partial name (big and small);
- ``batches``: many small files as one tar stream over an exec channel each way;
- ``backend``: :class:`SFTPBackend`.
"""

from __future__ import annotations

from ferry.backends.sftp.backend import SFTPBackend
from ferry.backends.sftp.host import close_all

__all__ = ["SFTPBackend", "close_all"]
