INSERT INTO tether_schema_compatible_migrations (version, name) VALUES ($1, $2);
