"""The delivery engine: from "an event was captured" to "the service has it".

The caller's side (:mod:`._intake`, :mod:`._buffer`) hands entries to the worker thread
(:mod:`._worker`, mechanism only), which runs the pipeline (:mod:`._pipeline`: finish,
``before_send``, scrub, roll-up), batches and encodes (:mod:`._batches`), posts and retries
(:mod:`._delivery`, :mod:`._sender`, :mod:`._retry`), spills to the durable spool
(:mod:`._spooling`, :mod:`._spool`) and flushes at exit and after fork (:mod:`._lifecycle`).
:mod:`._engine` composes one engine per server and key; :mod:`._ledger` counts every outcome.
"""
