-- The database's clock, which a relative time of a request ("since 10m") is
-- measured against.
SELECT now();
