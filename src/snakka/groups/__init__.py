"""Group coordination: classic consumer groups, KIP-848 consumer groups, share groups, committed
offsets.

Layout (the cores are sans-I/O: no sockets, no files, no asyncio, no wall clock):

* :mod:`.types`      shared value types and the contract every core follows (read it first).
* :mod:`.classic`    the classic rebalance protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup):
                     Kafka's group state machine, static membership, timers.
* :mod:`.consumer`   the KIP-848 consumer protocol (ConsumerGroupHeartbeat): member epochs,
                     server-side assignors, incremental revoke-then-assign.
* :mod:`.share_group` KIP-932 share groups (ShareGroupHeartbeat): membership and the
                     ``simple`` assignor; which records a member holds is ``snakka.share``'s.
* :mod:`.migration`  KIP-848 online upgrade/downgrade: the snapshot a group is handed over in
                     between the classic and consumer cores, and the rules of when it is.
* :mod:`.membership` what the consumer and share heartbeat protocols share (result shape,
                     assignment encodings, the rejection carrier).
* :mod:`.assignors`  the ``uniform`` and ``range`` server-side assignors.
* :mod:`.offsets`    committed offsets: commit/fetch/delete, expiry, and the pending
                     transactional offsets that COMMIT / ABORT markers resolve.
* :mod:`.coordinator` the thin I/O shell: routes requests to the cores, persists their records
                     in ``__consumer_offsets`` (an ordinary partition log), replays them at
                     start-up, and drives the cores' timers from the event loop.
"""
