-- Start-up check that the agent name lock belongs to this very backend, not
-- to a pooler's session shared with others: is it granted to
-- pg_backend_pid() (two-key advisory lock: classid, objid, objsubid 2, in
-- this database), which pid is that, and whom does the server see as its
-- client (NULL over a Unix socket)? See internal/agent/pooler.go.
SELECT
	EXISTS (
		SELECT 1
		FROM pg_locks
		WHERE locktype = 'advisory'
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid = hashtext('tether-agent-name')::oid
		  AND objid = hashtext(@name)::oid
		  AND objsubid = 2
		  AND granted
		  AND pid = pg_backend_pid()
	) AS held,
	pg_backend_pid() AS backend_pid,
	host(inet_client_addr()) AS client_addr,
	inet_client_port() AS client_port;
