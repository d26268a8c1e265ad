"""The search engine: islands, parent selection, explore/exploit, novelty, the MAP-Elites
archive, GPU-pool scheduling, the review gate and the budget; it publishes typed events.

Import from the modules (`cuco_tui.search.engine`, `.config`, `.events`, `.records`, ...):
`records` is shared with the agents and the lineage, which the engine imports in turn, so this
package imports nothing itself."""
