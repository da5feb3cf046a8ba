"""A paramiko transport that survives a channel closing while it renegotiates keys.

paramiko asks for new keys after 512 MiB each way (``Packetizer.REKEY_BYTES``). From the moment
it sends its KEXINIT until the new keys are in use, ``Transport._send_user_message`` holds every
other message back (RFC 4253 7.1). But the server may have closed a channel just before our
KEXINIT reached it; that CLOSE arrives during the exchange, and paramiko answers it with its own
CLOSE *on the transport thread*, which then waits for the exchange to finish. Only the transport
thread can finish it: nothing is read for 30 s (``clear_to_send_timeout``), then "Key-exchange
timed out waiting for key negotiation" and the whole connection drops (paramiko issue #822, open
since 2016). Tar batches close an exec channel every few MiB, so 1,000 x 1 MiB down (1 GiB, one
rekey) took 41-43 s here instead of ~6, every time.

:func:`guard` lets the transport thread hand such a message to a helper thread instead of
waiting: the helper sends it (in order, with any others so held) once the keys are in place, and
the transport thread goes on reading the exchange's replies. Every other thread still waits
as paramiko makes it wait.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


def guard(transport: Any) -> None:
    """Install the hand-off on ``transport`` (a ``paramiko.Transport``; once, before use)."""
    send = getattr(transport, "_send_user_message", None)
    event = getattr(transport, "clear_to_send", None)
    if send is None or event is None:
        return  # a paramiko without these: its own behaviour
    held: deque[Any] = deque()
    lock = threading.Lock()
    draining = [False]

    def drain() -> None:
        while True:
            with lock:
                if not held:
                    draining[0] = False
                    return
                message = held.popleft()
            try:
                send(message)  # waits for the new keys as paramiko's own senders do
            except Exception:
                pass  # the transport went: its readers see that themselves

    def send_user_message(message: Any) -> None:
        # While some are held, the transport thread's later messages queue behind them (order kept).
        if threading.current_thread() is transport and (not event.is_set() or draining[0]):
            with lock:
                held.append(message)
                if draining[0]:
                    return
                draining[0] = True
            threading.Thread(target=drain, name="ferry-ssh-held", daemon=True).start()
            return
        send(message)

    transport._send_user_message = send_user_message
