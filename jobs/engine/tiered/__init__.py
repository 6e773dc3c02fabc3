"""Tiered storage (KIP-405): what a broker's remote log metadata, its log dir and its remote store say together.

:mod:`jobs.engine.tiered.audit` reads them (``segjobs tiered audit``); the rules are pure code in
:mod:`jobs.rules.remote_log` (the metadata cache replayed) and :mod:`jobs.rules.tiered_audit` (the findings), the
formats in :mod:`segment_io.remote_metadata`, :mod:`segment_io.remote_layout` and :mod:`segment_io.topic_ids`.
"""
