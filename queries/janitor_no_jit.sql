-- For the rest of a janitor transaction: no JIT. The candidate query's plan
-- looks expensive to the planner (it cannot know how few rows each part
-- reads before the batch is full), and compiling it cost ~200 ms for a
-- query that runs in well under 1 ms.
SET LOCAL jit = off;
