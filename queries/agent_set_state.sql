UPDATE agents SET state = $3, last_seen = now() WHERE name = $1 AND generation = $2;
