"""The search: islands, parent selection, explore/exploit, novelty, the MAP-Elites archive, the
review gate and the budget; it publishes typed events.

The loop and commit are engine.py (SearchEngine); beside it steering.py (the engineer's
controls), proposing.py (drafts, the agent's requests, first screens), scheduling.py (compile
ahead, GPU leases from cuco_tui.executors, evaluations handed to an executor of cluster jobs,
finalists re-measured alone), outcomes.py (the
record committed for each way a proposal ends), feedback.py (failures as the agent reads them),
sessions.py (starting and reopening a session). Import from the modules: this package imports
nothing itself, so importing one module does not pull in the engine."""
