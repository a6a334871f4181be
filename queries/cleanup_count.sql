SELECT count(*) FROM cleanups;
