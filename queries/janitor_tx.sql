-- First statement of every janitor transaction, for the rest of it:
--   * no JIT: the candidate query's plan looks expensive to the planner (it
--     cannot know how few rows each part reads before the batch is full),
--     and compiling it cost ~200 ms for a query that runs in well under 1 ms;
--   * a bound on idling inside it (@idle_ms): an agent frozen between the
--     statements of a pass (SIGSTOP, a paused VM, a long GC stall) would
--     otherwise keep the rows it locked — other agents' jobs — locked until
--     it woke. PostgreSQL ends such a session after the bound
--     (idle_in_transaction_session_timeout) and rolls the pass back; the
--     next pass starts over.
-- Both are transaction-local (set_config's is_local), so they never leak
-- into other statements on the connection, through a pooler or not.
SELECT set_config('jit', 'off', true),
       set_config('idle_in_transaction_session_timeout', @idle_ms::bigint::text, true);
