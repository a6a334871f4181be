INSERT INTO tether_schema_migrations (version, name) VALUES ($1, $2);
