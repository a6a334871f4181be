-- The first statement of the hot path's multi-row statements' pipeline
-- (store.queryGeneric: the claim, the running and final batches): for the
-- rest of its implicit transaction, prepared statements use their generic
-- plan, and no JIT (see hot_no_jit.sql: a generic plan's cost estimate
-- passed jit_above_cost at ~600,000 queued jobs of one command). One
-- statement, so still one round trip and one Sync.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true);
