-- Where this server's history is: its current WAL write position and the
-- timeline it writes on (the first 8 hex digits of the WAL file name, which
-- pg_walfile_name derives from the current timeline). A promoted standby
-- writes on a new timeline; a server that lost acknowledged commits (an
-- asynchronous standby promoted before it received them, or a crash with
-- synchronous_commit off) writes below a position it once reported. Both
-- functions are refused during recovery: a standby cannot answer.
SELECT pg_current_wal_lsn()::text, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8);
